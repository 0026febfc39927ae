package imagefetch

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/containers/image/v5/types"
	"github.com/opencontainers/go-digest"
)

// cappedRef is an image destination (kurma's private OCI layout) whose
// blobs may not exceed the size their manifest declares, nor together the
// fetch's budget of compressed bytes. containers/image checks a blob's
// digest only at its end, and hands the destination the size the server
// announces rather than the manifest's, so without this an endless or
// oversized blob would fill the disk first.
type cappedRef struct {
	types.ImageReference
	left *atomic.Int64 // compressed bytes the fetch may still write
}

func newCappedRef(ref types.ImageReference, budget int64) cappedRef {
	left := &atomic.Int64{}
	left.Store(budget)
	return cappedRef{ImageReference: ref, left: left}
}

func (r cappedRef) NewImageDestination(ctx context.Context, sys *types.SystemContext) (types.ImageDestination, error) {
	d, err := r.ImageReference.NewImageDestination(ctx, sys)
	if err != nil {
		return nil, err
	}
	return &cappedDest{ImageDestination: d, left: r.left, declared: map[digest.Digest]int64{}}, nil
}

type cappedDest struct {
	types.ImageDestination
	left *atomic.Int64

	mu       sync.Mutex
	declared map[digest.Digest]int64 // layer sizes as the manifest says
}

// TryReusingBlob is where containers/image shows the destination each
// layer as its manifest describes it, before it reads the layer: the
// declared size is noted for PutBlob. (Nothing is ever reused: the layout
// is fresh.) A layer declared larger than the budget is refused at once.
func (d *cappedDest) TryReusingBlob(ctx context.Context, info types.BlobInfo, cache types.BlobInfoCache, canSubstitute bool) (bool, types.BlobInfo, error) {
	if left := d.left.Load(); info.Size > left {
		return false, types.BlobInfo{}, fmt.Errorf("%w: blob %s declares %d bytes, more than remains of the image size limit (%d)", ErrHostile, info.Digest, info.Size, left)
	}
	if info.Size >= 0 {
		d.mu.Lock()
		d.declared[info.Digest] = info.Size
		d.mu.Unlock()
	}
	return d.ImageDestination.TryReusingBlob(ctx, info, cache, canSubstitute)
}

// PutBlob writes at most the declared size (the manifest's, else the
// server's) and what remains of the budget.
func (d *cappedDest) PutBlob(ctx context.Context, stream io.Reader, info types.BlobInfo, cache types.BlobInfoCache, isConfig bool) (types.BlobInfo, error) {
	limit := d.left.Load()
	d.mu.Lock()
	declared, ok := d.declared[info.Digest]
	d.mu.Unlock()
	if !ok {
		declared = info.Size
	}
	if declared > limit {
		return types.BlobInfo{}, fmt.Errorf("%w: blob %s declares %d bytes, more than remains of the image size limit (%d)", ErrHostile, info.Digest, declared, limit)
	}
	if declared >= 0 {
		limit = declared
	}
	cr := &capReader{r: stream, max: limit, ctx: ctx}
	bi, err := d.ImageDestination.PutBlob(ctx, cr, info, cache, isConfig)
	if d.left.Add(-cr.n) < 0 && err == nil {
		err = fmt.Errorf("%w: blobs larger together than the image size limit", ErrHostile)
	}
	if cr.over {
		return types.BlobInfo{}, fmt.Errorf("%w: blob %s is larger than %d bytes (its declared size, or what remains of the image size limit)", ErrHostile, info.Digest, limit)
	}
	return bi, err
}
