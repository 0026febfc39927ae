package daemon

import (
	"errors"
	"fmt"
	"strings"

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
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if stateDir != "" {
		cfg.StateDir = stateDir
	}
	if runDir != "" {
		cfg.RunDir = runDir
	}
	return cfg, nil
}
