package k8stest

import "testing"

// TestSameRules: a table that only counted packets, or that nft prints
// differently once loaded back from its listing, has the same rules; one
// with a rule more has not.
func TestSameRules(t *testing.T) {
	before := "# Warning: table ip filter is managed by iptables-nft, do not touch!\ntable ip filter {\n\tchain F {\n\t\t counter packets 2 bytes 168 jump CNI-FORWARD\n\t}\n}\n"
	counted := "# Warning: table ip filter is managed by iptables-nft, do not touch!\ntable ip filter {\n\tchain F {\n\t\t counter packets 9 bytes 756 jump CNI-FORWARD\n\t}\n}\n"
	reloaded := "table ip filter {\n\tchain F {\n\t\tcounter packets 0 bytes 0 jump CNI-FORWARD\n\t}\n}\n"
	added := "table ip filter {\n\tchain F {\n\t\tcounter packets 0 bytes 0 jump CNI-FORWARD\n\t\tcounter packets 0 bytes 0 jump CNI-FORWARD\n\t}\n}\n"
	if !sameRules(before, counted) || !sameRules(before, reloaded) || sameRules(before, added) {
		t.Fatalf("sameRules: counted %v, reloaded %v, added %v", sameRules(before, counted), sameRules(before, reloaded), sameRules(before, added))
	}
}
