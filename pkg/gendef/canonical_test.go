package gendef

import "testing"

// TestCanonical: layout (whitespace, key order, escapes) goes; meaning
// (values, numbers as written, list order) stays.
func TestCanonical(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{ "b" : 1 ,"a":[ 2, {"d": true, "c": null} ] }`, `{"a":[2,{"c":null,"d":true}],"b":1}`},
		{`"\u0041<b"`, `"A<b"`},
		{`1.50`, `1.50`},
		{"\n[ ]\n", `[]`},
	} {
		got, err := Canonical([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	if _, err := Canonical([]byte(`{} {}`)); err == nil {
		t.Error("two values: no error")
	}
}
