package daemon

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/kurma-project/kurma/pkg/imagefetch"
	"github.com/kurma-project/kurma/pkg/netconfig"
)

// ConfigError is a config file with problems: kurmad does not boot on it,
// and a reload of it changes nothing.
type ConfigError struct {
	Path string
	Err  *netconfig.ValidationError
	// Reload: the running config stays (the message says nothing changed).
	Reload bool
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config %s has %d problem(s)", e.Path, len(e.Err.Problems))
	if e.Reload {
		b.WriteString("; nothing changed")
	}
	b.WriteString(":")
	for _, p := range e.Err.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// LoadConfig reads and checks the config file at path, then applies the
// command-line overrides of state_dir and run_dir ("" leaves the file's):
// what kurmad boots with, and what each reload reads. A config with
// problems is a *ConfigError listing every one.
func LoadConfig(path, stateDir, runDir string) (*netconfig.Config, error) {
	cfg, err := netconfig.Load(path)
	var ve *netconfig.ValidationError
	if errors.As(err, &ve) {
		return nil, &ConfigError{Path: path, Err: ve}
	}
	if err != nil {
		// A file that cannot be read is a config problem like any other
		// (kurmad exits 2; a reload answers invalid_config).
		return nil, &ConfigError{Path: path, Err: &netconfig.ValidationError{Problems: []netconfig.Problem{{Msg: err.Error()}}}}
	}
	if ps := trustProblems(cfg); len(ps) > 0 {
		return nil, &ConfigError{Path: path, Err: &netconfig.ValidationError{Problems: ps}}
	}
	if stateDir != "" {
		cfg.StateDir = stateDir
	}
	if runDir != "" {
		cfg.RunDir = runDir
	}
	return cfg, nil
}

// trustProblems are the problems of the trust cfg names, each at its
// key: a trusted key file that is not an armored OpenPGP key, a
// signature policy kurmad would refuse. The image store reads them
// again when it opens (and on each reload).
func trustProblems(cfg *netconfig.Config) []netconfig.Problem {
	var ps []netconfig.Problem
	for i, k := range cfg.TrustedKeys {
		if err := imagefetch.CheckTrustedKey(k.KeyFile); err != nil {
			ps = append(ps, netconfig.Problem{Path: fmt.Sprintf("trusted_keys[%d].key", i), Msg: fmt.Sprintf("%s: %v", k.KeyFile, err)})
		}
	}
	if cfg.SignaturePolicy != "" {
		data, err := os.ReadFile(cfg.SignaturePolicy)
		if err == nil {
			err = imagefetch.CheckPolicy(data)
		}
		if err != nil {
			ps = append(ps, netconfig.Problem{Path: "signature_policy", Msg: fmt.Sprintf("%s: %v", cfg.SignaturePolicy, err)})
		}
	}
	return ps
}
