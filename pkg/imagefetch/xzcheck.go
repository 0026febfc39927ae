package imagefetch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// maxXZDict bounds the LZMA2 dictionary an xz ACI may ask for: 64 MiB, what
// xz -9 (and -9e) use. The xz reader allocates whatever each block header
// says, up to 4 GiB, and its DictCap option is a minimum, not a cap: the
// block headers are checked before it runs (checkXZ).
const maxXZDict = 64 << 20

var (
	xzMagic       = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	xzFooterMagic = []byte{'Y', 'Z'}
)

// checkXZ reads the single xz stream that is the whole of r (size bytes)
// from its index and refuses it when a block's LZMA2 dictionary is over
// maxXZDict. A stream it cannot follow is refused too: the decoder would
// refuse it anyway. Only the headers, the index and the footer are read.
func checkXZ(r io.ReaderAt, size int64) error {
	bad := func(what string) error { return fmt.Errorf("%w: xz: %s", ErrHostile, what) }
	const hdr, ftr = 12, 12
	if size < hdr+ftr {
		return bad("shorter than a stream header and footer")
	}
	footer := make([]byte, ftr)
	if _, err := r.ReadAt(footer, size-ftr); err != nil {
		return err
	}
	if !bytes.Equal(footer[10:], xzFooterMagic) {
		return bad("the stream does not end the file (a footer was expected)")
	}
	indexSize := (int64(binary.LittleEndian.Uint32(footer[4:8])) + 1) * 4
	indexOff := size - ftr - indexSize
	if indexOff < hdr || indexSize > 1<<26 {
		return bad("index size out of range")
	}
	index := make([]byte, indexSize)
	if _, err := r.ReadAt(index, indexOff); err != nil {
		return err
	}
	ir := bytes.NewReader(index)
	if b, _ := ir.ReadByte(); b != 0 {
		return bad("no index indicator")
	}
	records, err := binary.ReadUvarint(ir)
	if err != nil || records > uint64(indexSize) {
		return bad("bad index")
	}
	off := int64(hdr)
	for range records {
		unpadded, err1 := binary.ReadUvarint(ir)
		_, err2 := binary.ReadUvarint(ir)
		if err1 != nil || err2 != nil || unpadded > uint64(size) {
			return bad("bad index record")
		}
		if err := checkXZBlockHeader(r, off, indexOff); err != nil {
			return err
		}
		off += (int64(unpadded) + 3) &^ 3
		if off > indexOff {
			return bad("blocks overrun the index")
		}
	}
	return nil
}

// checkXZBlockHeader checks the LZMA2 dictionary of the block whose header
// starts at off (and ends before end).
func checkXZBlockHeader(r io.ReaderAt, off, end int64) error {
	bad := func(what string) error { return fmt.Errorf("%w: xz: block at %d: %s", ErrHostile, off, what) }
	b := make([]byte, 1)
	if _, err := r.ReadAt(b, off); err != nil {
		return err
	}
	n := (int64(b[0]) + 1) * 4
	if b[0] == 0 || off+n > end {
		return bad("bad header size")
	}
	h := make([]byte, n)
	if _, err := r.ReadAt(h, off); err != nil {
		return err
	}
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
