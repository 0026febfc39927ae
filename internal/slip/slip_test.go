package slip

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"default", "default", 0},
		{"defualt", "default", 1}, // two neighbours swapped
		{"defaul", "default", 1},
		{"deffault", "default", 1},
		{"dafault", "default", 1},
		{"kitten", "sitting", 3},
		{"", "abc", 3},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
