package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeCreatePod(t *testing.T) {
	tests := []struct {
		in      string
		want    CreatePodRequest
		wantErr string
	}{
		{`{}`, CreatePodRequest{}, ""},
		{` {"networks": null} `, CreatePodRequest{}, ""},
		{"{\"name\":\"web\",\"networks\":[\"mynet\",\"other:IP=10.1.0.9;K=V\"]}\n",
			CreatePodRequest{Name: "web", Networks: []string{"mynet", "other:IP=10.1.0.9;K=V"}}, ""},
		{`{"networks":["a"]} {"networks":["b"]}`, CreatePodRequest{}, "unexpected data after the JSON object ending at offset 18"},
		{`{"networks":["a"],}`, CreatePodRequest{}, "malformed JSON"},
		{`{"Networks":["a"]}`, CreatePodRequest{Networks: []string{"a"}}, ""}, // encoding/json matches names case-insensitively
		{`{"networks":[" "]}`, CreatePodRequest{}, "empty network reference"},
		{`{"name":` + `"` + strings.Repeat("n", 254) + `"}`, CreatePodRequest{}, "longer than 253 bytes"},
		{`{"networks":{"a":1}}`, CreatePodRequest{}, `field "networks": expected a list of strings, got JSON object`},
		{`"x"`, CreatePodRequest{}, "must be a JSON object"},
		{`{"name":"\u0000"}`, CreatePodRequest{}, "control character"},
	}
	for _, tt := range tests {
		got, err := decodeCreatePod([]byte(tt.in))
		if tt.wantErr != "" {
			if err == nil || err.Status != 400 || err.Code != CodeBadRequest || !strings.Contains(err.Message, tt.wantErr) {
				t.Errorf("decode(%.40q) err = %v, want 400 bad_request containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("decode(%.40q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

// FuzzDecodeCreatePod checks that any body either decodes into a request
// that survives a JSON round trip, or fails with a 400 bad_request whose
// message is readable, and never panics.
func FuzzDecodeCreatePod(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"name":"web","networks":["mynet","other:IP=10.1.0.9;K=V"]}`, `{"networks":[]}`,
		`{"networks":null}`, `{"networks":[1]}`, `{"networks":"a"}`, `{"x":1}`, `{"networks":["a"]}garbage`,
		`{"networks":["a"`, `[]`, `null`, ``, `   `, `{"name":"\u0007"}`, `{"name":"a","name":"b"}`,
		"{\"networks\":[\"\xff\"]}", `{"networks":[{"name":"a"}]}`, `{"name":1e400}`, `{} {}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeCreatePod(data)
		if err != nil {
			if err.Status != 400 || err.Code != CodeBadRequest || err.Message == "" || !utf8.ValidString(err.Message) {
				t.Fatalf("bad error for %q: %+v", data, err)
			}
			return
		}
		b, merr := json.Marshal(req)
		if merr != nil {
			t.Fatalf("re-encoding %+v: %v", req, merr)
		}
		again, err := decodeCreatePod(b)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", b, err)
		}
		if len(req.Networks) == 0 {
			req.Networks, again.Networks = nil, nil
		}
		if !reflect.DeepEqual(req, again) {
			t.Fatalf("round trip %+v != %+v", req, again)
		}
	})
}

func TestStatusFor(t *testing.T) {
	for code, want := range map[string]int{
		CodeBadRequest: 400, CodeUnknownNetwork: 400, CodeNotFound: 404, CodeConflict: 409,
		CodeNetworkUnavailable: 503, CodePluginTimeout: 504, CodePluginFailed: 502, CodeInternal: 500, "whatever": 500,
	} {
		if got := StatusFor(code); got != want {
			t.Errorf("StatusFor(%q) = %d, want %d", code, got, want)
		}
	}
	e := Errorf(CodePluginTimeout, "network %q: %w", "mynet", errTest)
	if e.Status != 504 || e.Message != `network "mynet": test cause` || e.Unwrap() != errTest || !IsCode(e, CodePluginTimeout) {
		t.Errorf("Errorf = %+v", e)
	}
}

var errTest = errorString("test cause")

type errorString string

func (e errorString) Error() string { return string(e) }
