package main

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"time"
)

// reach connects to what the host offers every process of its network
// namespace, given on stdin ({"abstract": "name", "tcp": "127.0.0.1:port"}):
// a host daemon's abstract unix socket and a TCP port of the host. Both
// are the plugin's by design (docs/security.md).
func reach() map[string]string {
	r := map[string]string{}
	var t struct{ Abstract, TCP string }
	b, _ := io.ReadAll(os.Stdin)
	if err := json.Unmarshal(b, &t); err != nil {
		r["stdin"] = err.Error()
		return r
	}
	for k, dial := range map[string][2]string{
		"connect to a host's abstract unix socket": {"unix", "@" + t.Abstract},
		"connect to a host's TCP port":             {"tcp", t.TCP},
	} {
		c, err := net.DialTimeout(dial[0], dial[1], 5*time.Second)
		if err == nil {
			_, err = c.Write([]byte("hostile\n"))
			c.Close()
		}
		r[k] = outcome(err)
	}
	return r
}
