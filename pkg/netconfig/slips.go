package netconfig

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kurma-project/kurma/internal/slip"
	"github.com/kurma-project/kurma/pkg/imagefetch/imageref"
)

// misspeltKurmaKey is the key of kurma's that key, a network entry's key
// kurma does not know, misspells, "" when it is none: another case or
// separator ("Default", "container_interface"), or, for the longer keys,
// a slip of one letter ("defualt", "imgae", "limts"; two for keys of ten
// letters or more) that makes it no longer: a longer key ("defaults",
// "containerInterfaces") is a plugin's own. Such a key would otherwise go
// to the plugin, and the network run without what its author meant.
//
// "policy_networks", which kurmad writes into the policy network's
// config, counts as one of kurma's: its slip would otherwise reach the
// plugin beside the key kurmad writes.
//
// The answers are kept (slipAnswers): every network of a config has the
// same plugin keys, and their distances to each of kurma's keys were a
// tenth of a 20-network boot's CPU.
func misspeltKurmaKey(key string) string {
	if s, ok := slipAnswers.Load(key); ok {
		return s.(string)
	}
	s := findSlip(key)
	if slipAnswersKept.Add(1) <= maxSlipAnswers {
		slipAnswers.Store(key, s)
	}
	return s
}

// slipAnswers keeps misspeltKurmaKey's answers by key, at most
// maxSlipAnswers of them (a config's keys are few; a reload loop of
// random keys must not grow it without end).
var (
	slipAnswers     sync.Map
	slipAnswersKept atomic.Int64
)

const maxSlipAnswers = 4096

func findSlip(key string) string {
	known := append([]string{keyName, keyPolicyNetworks}, kurmaEntryKeys...)
	if s := sameKeyIgnoringCase(key, known); s != "" {
		return s
	}
	for _, k := range known {
		// Short keys are left alone: "name" is one letter from a
		// plugin's "mode", and so on.
		if len(k) < 5 || len(key) > len(k) {
			continue
		}
		allowed := 1
		if len(k) >= 10 {
			allowed = 2
		}
		if d := slip.Distance(strings.ToLower(key), strings.ToLower(k)); d > 0 && d <= allowed {
			return k
		}
	}
	return ""
}

// checkRelativeImages reports each network whose image is a relative
// local path (file://x.aci, oci-archive://x.tar: relative to the config
// file's directory, baseDir) that names no file. Such a path was written
// for where the file was before it was copied (examples/ in kurma's
// tree): kept, it would fail only at fetch time, network by network. An
// absolute path is left to the fetch, which retries until it appears.
func checkRelativeImages(ps *problems, cfg *Config, networksKey, baseDir string) {
	for i, n := range cfg.Networks {
		for _, m := range n.members {
			if m.Key != keyImage && m.Key != keyACI {
				continue
			}
			var s string
			if json.Unmarshal(m.Value, &s) != nil {
				continue
			}
			scheme, rest, ok := imageref.Split(s)
			sc, known := imageref.Lookup(scheme)
			p, _ := imageref.LocalPath(rest)
			if !ok || !known || !sc.Local || filepath.IsAbs(p) {
				continue
			}
			abs := filepath.Join(baseDir, p)
			if _, err := os.Stat(abs); err == nil {
				continue
			}
			msg := fmt.Sprintf("%q is relative to the config file's directory %s, and %s does not exist", s, baseDir, abs)
			if alt := sameNameNearby(filepath.Base(p), baseDir, cfg.StateDir); alt != "" {
				msg += fmt.Sprintf("; did you mean %q?", sc.Name+"://"+alt)
			} else {
				msg += fmt.Sprintf("; write the image's absolute path, such as %q", sc.Name+":///var/lib/kurma/"+filepath.Base(p))
			}
			ps.add(fmt.Sprintf("%s[%d].%s", networksKey, i, m.Key), msg)
		}
	}
}

// sameNameNearby is a file named name in one of dirs (the config's own
// directory, the state dir, where README's install puts kurma's image),
// "" when none has one.
func sameNameNearby(name string, dirs ...string) string {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	return ""
}
