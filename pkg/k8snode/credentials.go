package k8snode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kurma-project/kurma/pkg/api"
	"github.com/kurma-project/kurma/pkg/netplugin"
)

// Defaults of the tokens Credentials keeps.
const (
	// DefaultTokenExpiration is the life asked of each network's token:
	// short, since a plugin image is not trusted with more.
	DefaultTokenExpiration = time.Hour
	// tokenRefreshShare is the share of a token's life after which it is
	// replaced: well before it expires, as the kubelet does.
	tokenRefreshShare = 0.8
)

// Credentials keeps, for each network of kurmad's config with
// kubernetes_credentials, a token of the network's own ServiceAccount
// (netplugin.ServiceAccount: kurma-net-<network>, in Namespace) in the
// network's directory under Root, which kurmad bind-mounts read-only at
// the in-cluster path of that network's containers. The token comes from
// the TokenRequest API, lives Expiration, and is replaced at 80% of its
// life (or every Refresh): each file is written beside the old one and
// renamed over it in a directory that stays, so that the mount shows each
// new token without a restart of the plugin. A network whose token cannot
// be had (its ServiceAccount missing, kurma-node not allowed to create its
// tokens) gets the reason in its problem file, which kurmad's start of it
// names, and is tried again with backoff; once it has a token, kurmad is
// asked to retry the network (Kurmad).
type Credentials struct {
	Cluster *Cluster
	// Namespace is kurma's: the networks' ServiceAccounts live there.
	Namespace string
	// Root is the credentials root kurmad reads (its
	// KURMA_CREDENTIALS_DIR).
	Root string
	// CA is the cluster's CA bundle, written as each network's ca.crt.
	CA []byte
	// Expiration is the life asked of each token; 0 →
	// DefaultTokenExpiration (the API server takes at least 10 minutes).
	Expiration time.Duration
	// Refresh, when set, replaces each token this long after it was
	// issued, if that is sooner than 80% of its life.
	Refresh time.Duration
	// Kurmad, when set, is asked to retry a network once its token is
	// there after it had none, and says which networks still run once
	// they left the config.
	Kurmad *api.Client
	Log    logrus.FieldLogger

	mu     sync.Mutex
	loops  map[string]*tokenLoop
	wg     sync.WaitGroup
	closed bool
}

// tokenLoop keeps one network's token.
type tokenLoop struct {
	network string
	// retiring: the network left the config; it is dropped once kurmad
	// lists none of its generations.
	retiring bool
	wake     chan struct{} // retiring changed
	ctx      context.Context
	stop     context.CancelFunc // ends ctx: Close
}

// serviceAccountNameRE is a ServiceAccount's name: a DNS subdomain.
var serviceAccountNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// CredentialedNetworks are the names of the networks of kurmad's config
// cfg that ask for kubernetes_credentials, sorted.
func CredentialedNetworks(cfg []byte) ([]string, error) {
	var top struct {
		Snake []json.RawMessage `json:"pod_networks"`
		Camel []json.RawMessage `json:"podNetworks"`
	}
	if err := json.Unmarshal(cfg, &top); err != nil {
		return nil, fmt.Errorf("kurmad's config: %w", err)
	}
	var out []string
	for _, raw := range append(top.Snake, top.Camel...) {
		var n struct {
			Name  string `json:"name"`
			Creds bool   `json:"kubernetes_credentials"`
		}
		if json.Unmarshal(raw, &n) == nil && n.Creds && n.Name != "" {
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// Sync makes networks the networks with credentials: each new one gets
// its first token (or its problem) before Sync returns, so that kurmad
// finds it when it starts the network, and is kept from then on; one that
// left the list is kept while kurmad still runs a generation of it (its
// pods' dels), then dropped, its directory removed.
func (c *Credentials) Sync(ctx context.Context, networks []string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.loops == nil {
		c.loops = map[string]*tokenLoop{}
	}
	var fresh []*tokenLoop
	for _, name := range networks {
		if l := c.loops[name]; l != nil {
			if l.retiring {
				l.retiring = false
				poke(l.wake)
			}
			continue
		}
		l := &tokenLoop{network: name, wake: make(chan struct{}, 1)}
		// Its own context: a loop outlives the Sync that started it.
		l.ctx, l.stop = context.WithCancel(context.WithoutCancel(ctx))
		c.loops[name] = l
		fresh = append(fresh, l)
	}
	for name, l := range c.loops {
		if !slices.Contains(networks, name) && !l.retiring {
			l.retiring = true
			poke(l.wake)
		}
	}
	c.mu.Unlock()
	// The first tokens, concurrently: one network's slow answer holds
	// back no other.
	var wg sync.WaitGroup
	firsts := make([]tokenResult, len(fresh))
	for i, l := range fresh {
		wg.Go(func() { firsts[i] = c.renew(ctx, l.network, false) })
	}
	wg.Wait()
	// Started under c.mu: none after Close began waiting for them.
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	for i, l := range fresh {
		c.wg.Go(func() { c.keep(l.ctx, l, firsts[i]) })
	}
}

// Close stops keeping every token; the files stay, for the next
// kurma-node to renew.
func (c *Credentials) Close() {
	c.mu.Lock()
	c.closed = true
	for _, l := range c.loops {
		l.stop()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// RemoveAll stops keeping every token and removes the credentials root:
// kurma is being uninstalled.
func (c *Credentials) RemoveAll() error {
	c.Close()
	return os.RemoveAll(c.Root)
}

// tokenResult is what one renewal came to: when to renew next.
type tokenResult struct {
	ok      bool
	next    time.Time // when the token is due for renewal (ok)
	expires time.Time // when the token written expires (ok)
}

// keep renews l's token when due, and after a failure with backoff (1 s
// doubling to a minute), until ctx ends or the network is dropped.
func (c *Credentials) keep(ctx context.Context, l *tokenLoop, last tokenResult) {
	log := c.log().WithField("network", l.network)
	failures := 0
	expires := last.expires
	for {
		due := last.next
		if last.ok {
			failures, expires = 0, last.expires
		} else {
			due = time.Now().Add(min(time.Second<<min(failures, 6), time.Minute))
			failures++
		}
		if !c.wait(ctx, l, due) {
			return
		}
		last = c.renew(ctx, l.network, !last.ok)
		if !last.ok && !expires.IsZero() && time.Now().After(expires) {
			// Its token expired: the plugin finds none rather than a
			// refused one, and a restart of the network says why.
			_ = os.Remove(filepath.Join(netplugin.CredentialsDir(c.Root, l.network), netplugin.TokenFile))
			log.Warn("the network's token expired and could not be renewed: removed it")
			expires = time.Time{}
		}
	}
}

// wait waits until due; false when ctx ended or the network was dropped
// meanwhile (a change of its place in the config wakes it to look).
func (c *Credentials) wait(ctx context.Context, l *tokenLoop, due time.Time) bool {
	t := time.NewTimer(max(time.Until(due), 0))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-l.wake:
			if c.drop(ctx, l) {
				return false
			}
		case <-t.C:
			return !c.drop(ctx, l)
		}
	}
}

// drop removes a retiring network that kurmad no longer runs: its loop
// ends, its directory and problem go. A network of the config, or one
// kurmad still runs (or cannot say), stays.
func (c *Credentials) drop(ctx context.Context, l *tokenLoop) bool {
	c.mu.Lock()
	retiring := l.retiring
	c.mu.Unlock()
	if !retiring {
		return false
	}
	if c.Kurmad != nil {
		gens, err := c.Kurmad.Networks(ctx)
		if err != nil || slices.ContainsFunc(gens, func(g api.Generation) bool { return g.Network == l.network }) {
			return false
		}
	}
	c.mu.Lock()
	if !l.retiring || c.loops[l.network] != l {
		c.mu.Unlock()
		return false
	}
	delete(c.loops, l.network)
	c.mu.Unlock()
	l.stop()
	_ = os.RemoveAll(netplugin.CredentialsDir(c.Root, l.network))
	_ = os.Remove(netplugin.CredentialsProblem(c.Root, l.network))
	c.log().WithField("network", l.network).Info("the network is gone from kurmad: its credentials are removed")
	return true
}

// renew asks for a token of network's ServiceAccount and writes it with
// the CA and namespace; on failure it writes why in the network's problem
// file. After a failure (failedBefore), a success asks kurmad to retry the
// network, whose start waits for the token.
func (c *Credentials) renew(ctx context.Context, network string, failedBefore bool) tokenResult {
	log := c.log().WithField("network", network)
	issued := time.Now()
	tok, err := c.token(ctx, network)
	if err == nil {
		err = c.write(network, tok)
	}
	if err != nil {
		if werr := c.writeProblem(network, err.Error()); werr != nil {
			log.WithError(werr).Error("writing why the network has no token")
		}
		log.WithError(err).Warn("no token for the network's ServiceAccount")
		return tokenResult{}
	}
	_ = os.Remove(netplugin.CredentialsProblem(c.Root, network))
	life := tok.Expires.Sub(issued)
	next := issued.Add(time.Duration(float64(life) * tokenRefreshShare))
	if c.Refresh > 0 && issued.Add(c.Refresh).Before(next) {
		next = issued.Add(c.Refresh)
	}
	log.WithFields(logrus.Fields{"service_account": c.Namespace + "/" + netplugin.ServiceAccount(network),
		"expires": tok.Expires.UTC().Format(time.RFC3339), "renew_at": next.UTC().Format(time.RFC3339)}).Info("wrote the network's token")
	if failedBefore && c.Kurmad != nil {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := c.Kurmad.RetryNetwork(rctx, network); err != nil && !api.IsCode(err, api.CodeNotFound) && !api.IsCode(err, api.CodeUnknownNetwork) {
			log.WithError(err).Debug("asking kurmad to start the network now that it has a token")
		}
		cancel()
	}
	return tokenResult{ok: true, next: next, expires: tok.Expires}
}

// token is a new token of network's ServiceAccount, or why there is none.
func (c *Credentials) token(ctx context.Context, network string) (*Token, error) {
	sa := netplugin.ServiceAccount(network)
	if len(sa) > 253 || !serviceAccountNameRE.MatchString(sa) {
		return nil, fmt.Errorf("ServiceAccount %s: the network's name makes no valid ServiceAccount name (lowercase letters, digits, '-' and '.'): rename the network to have Kubernetes credentials", sa)
	}
	exp := c.Expiration
	if exp <= 0 {
		exp = DefaultTokenExpiration
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tok, err := c.Cluster.RequestToken(rctx, c.Namespace, sa, exp)
	if err != nil {
		var se *StatusError
		hint := ""
		if errors.As(err, &se) {
			switch se.Code {
			case 404:
				hint = fmt.Sprintf(": create ServiceAccount %s in namespace %s, bound to the RBAC the network's plugin needs", sa, c.Namespace)
			case 403:
				hint = fmt.Sprintf(": kurma-node may not create its tokens; grant its ServiceAccount create on serviceaccounts/token for %s in namespace %s", sa, c.Namespace)
			}
		}
		return nil, fmt.Errorf("ServiceAccount %s/%s: TokenRequest: %w%s", c.Namespace, sa, err, hint)
	}
	return tok, nil
}

// write puts tok, the CA and the namespace in network's directory, each
// file renamed over the old one (the mount of the directory shows it).
func (c *Credentials) write(network string, tok *Token) error {
	if err := os.MkdirAll(c.Root, 0o700); err != nil {
		return fmt.Errorf("credentials root: %w", err)
	}
	dir := netplugin.CredentialsDir(c.Root, network)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("credentials of network %q: %w", network, err)
	}
	// The token last: a plugin that sees the new one finds its CA there.
	for _, f := range []struct {
		name string
		data []byte
	}{{netplugin.CAFile, c.CA}, {netplugin.NamespaceFile, []byte(c.Namespace)}, {netplugin.TokenFile, []byte(tok.Token)}} {
		path := filepath.Join(dir, f.name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, f.data) {
			continue
		}
		if err := writeAtomic(path, bytes.NewReader(f.data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeProblem says why network has no token, for kurmad.
func (c *Credentials) writeProblem(network, why string) error {
	p := netplugin.CredentialsProblem(c.Root, network)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	return writeAtomic(p, strings.NewReader(why+"\n"), 0o600)
}

func (c *Credentials) log() logrus.FieldLogger {
	if c.Log == nil {
		return logrus.StandardLogger()
	}
	return c.Log
}
