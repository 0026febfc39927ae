package netconfig

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
)

// parseListen reads metrics_listen: "host:port" with a numeric port (the
// host may be empty: every address), or the absolute path of a unix socket.
func parseListen(ps *problems, path string, raw json.RawMessage) string {
	var s string
	if !decodeTyped(ps, path, raw, &s, `a string: "host:port" such as "127.0.0.1:9410", or a unix socket path such as "/run/kurma/metrics.sock"`) {
		return ""
	}
	if s == "" {
		return ""
	}
	if s[0] == '/' {
		return filepath.Clean(s)
	}
	host, port, err := net.SplitHostPort(s)
	if err == nil {
		var n int
		if n, err = strconv.Atoi(port); err == nil && (n < 1 || n > 65535) {
			err = fmt.Errorf("port %d is out of range", n)
		}
	}
	if err != nil {
		ps.add(path, fmt.Sprintf(`%q is neither "host:port" (such as "127.0.0.1:9410") nor an absolute unix socket path: %v`, s, err))
		return ""
	}
	if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		ps.add(path, fmt.Sprintf("%q: the host must be an IP address or localhost, not %q (kurmad resolves no names)", s, host))
		return ""
	}
	return s
}

// parseRedactKeys reads redact_keys: a list of non-empty, distinct keys.
func parseRedactKeys(ps *problems, path string, raw json.RawMessage) []string {
	keys, ok := decodeStrings(ps, path, raw, `a list of config keys such as ["password", "token"]`)
	if !ok {
		return nil
	}
	for i, k := range keys {
		switch {
		case k == "":
			ps.add(fmt.Sprintf("%s[%d]", path, i), "an empty key; remove it")
		case slices.Index(keys, k) < i:
			ps.add(fmt.Sprintf("%s[%d]", path, i), fmt.Sprintf("%q is listed twice; keep one", k))
		}
	}
	return keys
}
