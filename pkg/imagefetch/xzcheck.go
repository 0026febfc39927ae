package imagefetch

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// maxXZDict bounds the LZMA2 dictionary an xz ACI may ask for: 64 MiB, what
// xz -9 (and -9e) use. The xz reader allocates whatever each block header
// says, up to 4 GiB, and its DictCap option is a minimum, not a cap: the
// block headers are checked before it runs (checkXZ).
const maxXZDict = 64 << 20

var xzMagic = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}

// checkXZ follows the xz stream at the start of r (size bytes) block by
// block, as the decoder reads it, and refuses it when a block's LZMA2
// dictionary is over maxXZDict. It reads each block header and skips the
// block's data by its LZMA2 chunk headers, never decompressing; it stops at
// the stream's index, the decoder's next step after the last block. (What
// follows the stream is refused by the decoder.) A stream it cannot follow
// is refused too: the decoder would refuse it anyway. Reading from the end,
// as an index-driven check would, lets an appended index stand in for the
// stream's own.
func checkXZ(r io.ReaderAt, size int64) error {
	bad := func(what string) error { return fmt.Errorf("%w: xz: %s", ErrHostile, what) }
	w := &xzWalker{sr: io.NewSectionReader(r, 0, size)}
	w.br = bufio.NewReader(w.sr)
	hdr, err := w.read(12)
	if err != nil {
		return bad("shorter than a stream header")
	}
	if !bytes.Equal(hdr[:6], xzMagic) || hdr[6] != 0 || hdr[7] > 0x0f {
		return bad("bad stream header")
	}
	checkSize := int64(0) // by check type: none, CRC32, CRC64, SHA-256 and the reserved ones
	if id := hdr[7]; id > 0 {
		checkSize = 4 << ((id - 1) / 3)
	}
	for {
		start := w.off
		b, err := w.read(1)
		if err != nil {
			return bad("truncated before the index")
		}
		if b[0] == 0 {
			return nil // the index indicator: no block follows
		}
		n := int(b[0])*4 + 4
		rest, err := w.read(n - 1)
		if err != nil {
			return bad(fmt.Sprintf("block at %d: truncated header", start))
		}
		if err := checkXZBlockHeader(append(b, rest...), start); err != nil {
			return err
		}
		if err := w.skipLZMA2(); err != nil {
			return bad(fmt.Sprintf("block at %d: %v", start, err))
		}
		// Block padding to a multiple of four, then the check.
		if err := w.skip((4-w.off%4)%4 + checkSize); err != nil {
			return bad(fmt.Sprintf("block at %d: %v", start, err))
		}
	}
}

// xzWalker reads an xz file forward, skipping what it need not read.
type xzWalker struct {
	sr  *io.SectionReader
	br  *bufio.Reader
	off int64 // of the next byte br returns
}

func (w *xzWalker) read(n int) ([]byte, error) {
	b := make([]byte, n)
	m, err := io.ReadFull(w.br, b)
	w.off += int64(m)
	return b, err
}

// skip moves n bytes on, within the file.
func (w *xzWalker) skip(n int64) error {
	if w.off+n > w.sr.Size() {
		return errors.New("truncated")
	}
	if n <= int64(w.br.Buffered()) {
		_, _ = w.br.Discard(int(n))
	} else {
		if _, err := w.sr.Seek(w.off+n, io.SeekStart); err != nil {
			return err
		}
		w.br.Reset(w.sr)
	}
	w.off += n
	return nil
}

// skipLZMA2 skips a block's LZMA2 data, chunk by chunk, up to and
// including its end marker.
func (w *xzWalker) skipLZMA2() error {
	for {
		c, err := w.read(1)
		if err != nil {
			return errors.New("truncated LZMA2 data")
		}
		var skip int64
		switch ctl := c[0]; {
		case ctl == 0x00:
			return nil
		case ctl == 0x01 || ctl == 0x02: // uncompressed chunk: its size - 1
			sz, err := w.read(2)
			if err != nil {
				return errors.New("truncated LZMA2 chunk header")
			}
			skip = int64(binary.BigEndian.Uint16(sz)) + 1
		case ctl >= 0x80: // LZMA chunk: unpacked size - 1 (low 16 bits), packed size - 1, properties on a reset
			h, err := w.read(4)
			if err != nil {
				return errors.New("truncated LZMA2 chunk header")
			}
			skip = int64(binary.BigEndian.Uint16(h[2:])) + 1
			if ctl>>5&3 >= 2 {
				skip++
			}
		default:
			return fmt.Errorf("bad LZMA2 chunk control byte %#x", ctl)
		}
		if err := w.skip(skip); err != nil {
			return err
		}
	}
}

// checkXZBlockHeader checks the LZMA2 dictionary in h, the header of the
// block at off.
func checkXZBlockHeader(h []byte, off int64) error {
	bad := func(what string) error { return fmt.Errorf("%w: xz: block at %d: %s", ErrHostile, off, what) }
	n := len(h)
	hr := bytes.NewReader(h[1 : n-4]) // without the size byte and the CRC32
	flags, _ := hr.ReadByte()
	if flags&0x3c != 0 {
		return bad("reserved flags set")
	}
	for _, present := range []byte{0x40, 0x80} { // compressed, uncompressed size
		if flags&present != 0 {
			if _, err := binary.ReadUvarint(hr); err != nil {
				return bad("bad size field")
			}
		}
	}
	for range int(flags&3) + 1 {
		id, err1 := binary.ReadUvarint(hr)
		propSize, err2 := binary.ReadUvarint(hr)
		if err1 != nil || err2 != nil || propSize > uint64(hr.Len()) {
			return bad("bad filter flags")
		}
		props := make([]byte, propSize)
		_, _ = io.ReadFull(hr, props)
		if id != 0x21 { // LZMA2
			continue
		}
		if len(props) != 1 || props[0] > 40 {
			return bad("bad LZMA2 properties")
		}
		if dict := xzDictSize(props[0]); dict > maxXZDict {
			return fmt.Errorf("%w: xz: block at %d asks for a %d MiB dictionary, over the %d MiB limit", ErrHostile, off, dict>>20, maxXZDict>>20)
		}
	}
	return nil
}

// xzDictSize decodes an LZMA2 dictionary size byte (0-40).
func xzDictSize(p byte) int64 {
	if p == 40 {
		return 1<<32 - 1
	}
	return int64(2|p&1) << (p/2 + 11)
}
