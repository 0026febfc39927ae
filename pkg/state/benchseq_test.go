package state

var benchSeqs = []struct {
	name string
	fn   journalSeq
}{
	{"legacy", legacySeq},
}
