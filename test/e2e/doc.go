// Package e2e holds kurma's end-to-end tests: they build the real kurmad,
// kurmactl and kurma-agent binaries, boot kurmad as a child process on a
// config of their own (state and run dirs in a temp dir, bridges kt-e2e0 and
// kt-e2e1, subnets 10.204.0.0/16 and 10.205.0.0/16, link prefix "kte"; the
// runtime tests' kt-rt0 and kt-rt1, 10.217.0.0/16 and 10.218.0.0/16, "ktr")
// and drive it through kurmactl and the API client, then check that nothing
// was left behind. They need root; see internal/testutil.RequireRoot.
//
// They need images/out/cni-netplugin.aci (`make images`); the plugin image
// they boot is that ACI plus internal/testplugins/cnitest, a CNI plugin that
// fails, hangs or crashes on request. Run them with
//
//	sudo go test -tags containers_image_openpgp -count=1 ./test/e2e/
//
// KURMA_E2E_LOG=1 prints every daemon's log, not only a failing test's.
//
// docs_test.go and readme_test.go test the documentation: the configs and
// conflists README.md and docs/ show load, their links resolve, and
// README's podman snippet runs; all but the snippet need no root.
package e2e
