// Package archtest checks docs/architecture.md against the code: the
// import rules in its "Import rules" table hold (go list -deps), and its
// "Packages" section lists every package of the module. The rules are read
// from the document itself, so the document and the check cannot drift.
// It also keeps one rule of the code itself: no package exports a mutable
// package-level table (a slice or map variable).
package archtest
