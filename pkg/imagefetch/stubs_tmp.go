package imagefetch

import (
	"context"
	"errors"
	"net/url"
)

func (f *Fetcher) fetchHTTP(ctx context.Context, uri string, u *url.URL, progress func(done, total int64)) (*Image, error) {
	return nil, errors.New("http: not implemented yet")
}

func (f *Fetcher) fetchDocker(ctx context.Context, uri string, progress func(done, total int64)) (*Image, error) {
	return nil, errors.New("docker: not implemented yet")
}

func (f *Fetcher) fetchDiscovery(ctx context.Context, name string, progress func(done, total int64)) (*Image, error) {
	return nil, errors.New("discovery: not implemented yet")
}
