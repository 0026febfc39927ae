package imagefetch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/appc/spec/discovery"
	"github.com/appc/spec/schema/types"
)

// discoveryMu serialises appc discovery: the library only takes its HTTP
// client from the package variable discovery.Client, which is pointed at
// the Fetcher's transport for the duration of a call.
var discoveryMu sync.Mutex

// fetchDiscovery resolves an appc name ("example.com/x:1.0,label=value")
// by appc discovery over HTTPS (plain HTTP only with InsecureDiscovery),
// adding this host's os and arch labels (appc's names: arch=aarch64 on
// arm64), and fetches the ACI with its signature. The image must carry the
// name and every label asked for.
func (f *Fetcher) fetchDiscovery(ctx context.Context, name string, r request) (*Image, error) {
	app, err := discovery.NewAppFromString(name)
	if err != nil {
		return nil, fmt.Errorf("appc name %q: %w", name, err)
	}
	if app.Labels == nil {
		app.Labels = map[types.ACIdentifier]string{}
	}
	hostOS, hostArch := appcPlatform(hostPlatform())
	if _, ok := app.Labels["os"]; !ok {
		app.Labels["os"] = hostOS
	}
	if _, ok := app.Labels["arch"]; !ok {
		app.Labels["arch"] = hostArch
	}
	key := name
	want := aciWant{name: app.Name.String(), labels: map[string]string{}}
	for k, v := range app.Labels {
		want.labels[string(k)] = v
	}
	eps, err := f.discover(ctx, *app)
	if err != nil {
		if img, _, ok := f.stored(key, r); ok && ctx.Err() == nil && checkLabels(img.Labels, want.labels) == nil {
			f.log.WithFields(map[string]any{"image": img.Name, "id": img.ID, "source": key, "error": err.Error()}).
				Warn("appc discovery failed; using the stored copy")
			return img, nil
		}
		return nil, err
	}
	var errs []error
	for _, ep := range eps {
		if !f.opts.InsecureDiscovery && !strings.HasPrefix(ep.ACI, "https://") {
			errs = append(errs, fmt.Errorf("%s: not HTTPS and insecure_discovery is off", ep.ACI))
			continue
		}
		img, err := f.fetchACIURL(ctx, key, ep.ACI, ep.ASC, "", want, r)
		if err == nil {
			// Also what a short-cut (not modified, unreachable) handed
			// out, which may predate this check.
			err = checkLabels(img.Labels, want.labels)
		}
		if err == nil {
			return img, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return nil, fmt.Errorf("appc name %q: %w", name, errs[0])
	}
	return nil, fmt.Errorf("appc name %q: no endpoint worked: %w", name, errors.Join(errs...))
}

func (f *Fetcher) discover(ctx context.Context, app discovery.App) (discovery.ACIEndpoints, error) {
	insecure := discovery.InsecureNone
	if f.opts.InsecureDiscovery {
		insecure = discovery.InsecureHTTP
	}
	discoveryMu.Lock()
	saved := *discovery.Client
	tr := f.client.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	discovery.Client.Transport = tr
	// The library reports a refused redirect as the redirect's status:
	// remember the refusal, to fail with it.
	var refused error
	discovery.Client.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		err := f.client.CheckRedirect(req, via)
		if errors.Is(err, ErrInsecureRedirect) {
			refused = err
		}
		return err
	}
	discovery.Client.Timeout = 60 * time.Second

	type result struct {
		eps discovery.ACIEndpoints
		err error
	}
	ch := make(chan result, 1)
	go func() {
		eps, attempts, err := discovery.DiscoverACIEndpoints(app, nil, insecure, 0)
		*discovery.Client = saved
		discoveryMu.Unlock()
		if err == nil && len(eps) == 0 {
			err = fmt.Errorf("no ac-discovery meta tags found")
		}
		if err != nil && refused != nil {
			err = fmt.Errorf("%w: %w", refused, err)
		}
		if err != nil && len(attempts) > 0 {
			// Each attempt's error stays matchable (errors.Is): a refused
			// redirect is told from an unreachable host.
			format, args := "%w (", []any{err}
			for i, at := range attempts {
				if i > 0 {
					format += "; "
				}
				format += "%s: %w"
				args = append(args, at.Prefix, at.Error)
			}
			err = fmt.Errorf(format+")", args...)
		}
		ch <- result{eps, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("appc discovery of %s: %w", app.Name, r.err)
		}
		return r.eps, nil
	case <-ctx.Done():
		// The library takes no context; its client timeout ends the call.
		return nil, ctx.Err()
	}
}
