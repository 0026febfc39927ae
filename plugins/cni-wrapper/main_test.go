package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kurma-project/kurma/pkg/cniwrap"
)

func TestDispatch(t *testing.T) {
	tests := []struct {
		argv     []string
		wantCode int
		wantErr  string
	}{
		{[]string{"/opt/network/frob"}, 2, "install it as add"},
		{[]string{"cni-wrapper"}, 2, "install it as add"},
		{[]string{"/opt/network/add"}, 1, "usage"},
		{[]string{"cni-wrapper", "del", "/x"}, 1, "usage"},
		{[]string{"/opt/network/check", "a", "b", "c", "d"}, 1, "usage"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.argv, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.argv, strings.NewReader(`{"cniVersion":"0.4.0","name":"n","type":"bridge"}`), &stdout, &stderr)
			if code != tt.wantCode || !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("code %d stderr %q, want %d and %q", code, stderr.String(), tt.wantCode, tt.wantErr)
			}
			if code == 1 {
				var e cniwrap.ErrorObject
				if err := json.Unmarshal(stdout.Bytes(), &e); err != nil || e.CNIVersion != "0.4.0" || e.Code == 0 {
					t.Errorf("stdout %q is not a CNI error object of version 0.4.0", stdout.String())
				}
			}
		})
	}
}
