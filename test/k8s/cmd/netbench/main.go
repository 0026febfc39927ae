// Command netbench is the TCP meter of `make k8s-bench`'s cross-node rows,
// shipped in the k8s-test workload image (/bin/netbench):
//
//	netbench serve [-port 5201]                  answers rtt and tput clients
//	netbench rtt -addr HOST:PORT [-n 2000]       round trips of one byte on one connection
//	netbench tput -addr HOST:PORT [-seconds 3]   bytes sent in one direction on one connection
//	netbench connect -addr HOST:PORT [-n 2000]   new connections, one after another: each connect's time
//	netbench probe -addr HOST:PORT [-seconds 8] [-every 5ms] [-timeout 200ms]
//	                                             a new connection started every -every, each given -timeout
//
// The clients print one JSON object: rtt its round trips' p50 and p90 in
// microseconds, tput its bytes, seconds and Gbit/s (counted once the
// server has read them all), connect its connects' p50 and p90 in
// microseconds (the first packet's way there and back: what a policy
// that looks at new connections costs), probe every attempt's start (Unix
// nanoseconds) and whether it connected (for the time from a policy's
// apply to its effect).
package main

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: netbench serve|rtt|tput [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	port := fs.Int("port", 5201, "serve: the TCP port")
	addr := fs.String("addr", "", "rtt, tput: the server's HOST:PORT")
	n := fs.Int("n", 2000, "rtt: round trips")
	seconds := fs.Float64("seconds", 3, "tput: how long to send; probe: how long to probe")
	every := fs.Duration("every", 5*time.Millisecond, "probe: time between two attempts' starts")
	timeout := fs.Duration("timeout", 200*time.Millisecond, "probe: how long an attempt may take")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(*port)
	case "rtt":
		err = rtt(*addr, *n)
	case "tput":
		err = tput(*addr, time.Duration(*seconds*float64(time.Second)))
	case "connect":
		err = connects(*addr, *n)
	case "probe":
		err = probe(*addr, time.Duration(*seconds*float64(time.Second)), *every, *timeout)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "netbench:", err)
		os.Exit(1)
	}
}

func serve(port int) error {
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return err
	}
	for {
		conn, err := l.Accept()
		if err != nil {
			return err
		}
		go handle(conn)
	}
}

// handle reads the client's mode byte: 'r' echoes every byte back, 's'
// reads to the end and answers the count.
func handle(conn net.Conn) {
	defer conn.Close()
	mode := make([]byte, 1)
	if _, err := io.ReadFull(conn, mode); err != nil {
		return
	}
	switch mode[0] {
	case 'r':
		b := make([]byte, 1)
		for {
			if _, err := io.ReadFull(conn, b); err != nil {
				return
			}
			if _, err := conn.Write(b); err != nil {
				return
			}
		}
	case 's':
		n, _ := io.Copy(io.Discard, conn)
		_ = binary.Write(conn, binary.BigEndian, n)
	}
}

func rtt(addr string, n int) error {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{'r'}); err != nil {
		return err
	}
	b := []byte{'x'}
	d := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := conn.Write(b); err != nil {
			return err
		}
		if _, err := io.ReadFull(conn, b); err != nil {
			return err
		}
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	us := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))]) / float64(time.Microsecond) }
	return json.NewEncoder(os.Stdout).Encode(map[string]float64{"p50_us": us(0.5), "p90_us": us(0.9)})
}

func tput(addr string, dur time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{'s'}); err != nil {
		return err
	}
	buf := make([]byte, 128<<10)
	start := time.Now()
	var sent int64
	for time.Since(start) < dur {
		n, err := conn.Write(buf)
		sent += int64(n)
		if err != nil {
			return err
		}
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return err
	}
	var got int64
	if err := binary.Read(conn, binary.BigEndian, &got); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	if got != sent {
		return fmt.Errorf("sent %d bytes, the server read %d", sent, got)
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]float64{"bytes": float64(got), "seconds": secs, "gbps": float64(got) * 8 / secs / 1e9})
}

// connects times n connections made one after another, each closed at
// once: a connect is the first packet's way to the server and back.
func connects(addr string, n int) error {
	d := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		d = append(d, time.Since(t0))
		conn.Close()
	}
	slices.Sort(d)
	us := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))]) / float64(time.Microsecond) }
	return json.NewEncoder(os.Stdout).Encode(map[string]float64{"p50_us": us(0.5), "p90_us": us(0.9)})
}

// attempt is one of probe's connections.
type attempt struct {
	Start int64 `json:"t"` // Unix nanoseconds
	OK    bool  `json:"ok"`
}

// probe starts a connection every interval for dur, each given timeout,
// and prints every attempt, in the order they started.
func probe(addr string, dur, every, timeout time.Duration) error {
	out := make(chan attempt, 1024)
	var started int
	tick := time.NewTicker(every)
	defer tick.Stop()
	for end := time.Now().Add(dur); time.Now().Before(end); <-tick.C {
		started++
		go func(t0 time.Time) {
			conn, err := net.DialTimeout("tcp", addr, timeout)
			if err == nil {
				conn.Close()
			}
			out <- attempt{Start: t0.UnixNano(), OK: err == nil}
		}(time.Now())
	}
	all := make([]attempt, 0, started)
	for range started {
		all = append(all, <-out)
	}
	slices.SortFunc(all, func(a, b attempt) int { return cmp.Compare(a.Start, b.Start) })
	return json.NewEncoder(os.Stdout).Encode(all)
}
