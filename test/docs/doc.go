// Package docs holds the tests of kurma's documentation (README.md,
// docs/*.md and the other Markdown files of the repository): the examples
// they show are run, and their links resolve. Fenced blocks carry what they
// are in their info string, after the language:
//
//	```json kurmad-config [FILE]   a kurmad config, loaded by pkg/netconfig
//	```json conflist [FILE]        a CNI conflist, loaded by libcni
//	```sh podman-snippet           README's podman snippet, run by test/e2e
//
// With FILE (a path from the repository's root), the block must also be
// that file's content, byte for byte, so an example file and its copy in a
// document cannot drift apart. The tests need no root and touch nothing.
package docs
