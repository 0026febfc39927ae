package state

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The log is where every write goes first: one record per write, appended
// with one write(2) before the write returns (so a kill -9 loses nothing:
// the kernel has it), made durable by Sync (one fdatasync for every
// record appended so far, shared by concurrent callers), and folded into
// the bbolt snapshot (compact) once it grows. Each log file is
// <journal>-log.<n>, n increasing, never reused:
//
//	header: "KURMALOG" | version (uint32 BE)
//	record: payload length (uint32 BE) | CRC-32C of the payload (uint32 BE) | payload
//	payload: kind (1 byte) | key length (uvarint) | key | value (the record's JSON; none for a delete)
//
// Reading stops at the first record that is cut short or fails its
// checksum, and ignores everything after it, in that file and the later
// ones: what a power cut left of writes no Sync covered. Everything a
// Sync covered lies before that point.

const (
	logMagic   = "KURMALOG"
	logVersion = 1
	logHeader  = len(logMagic) + 4
	// maxRecord bounds a record's length as read back, so that garbage
	// never makes the reader allocate much.
	maxRecord = 64 << 20
)

// Record kinds; the numbers are on disk and never change.
const (
	kindPutPod byte = 1 + iota
	kindDeletePod
	kindPutGeneration
	kindDeleteGeneration
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// logFile is one open log file.
type logFile struct {
	f        *os.File
	n        uint64
	size     int64
	unsynced bool // appended to since its last fdatasync
}

func logPath(journal string, n uint64) string {
	return fmt.Sprintf("%s-log.%06d", journal, n)
}

// logFiles lists journal's log files, by number.
func logFiles(journal string) ([]uint64, error) {
	matches, err := filepath.Glob(journal + "-log.*")
	if err != nil {
		return nil, err
	}
	var ns []uint64
	for _, m := range matches {
		n, err := strconv.ParseUint(strings.TrimPrefix(m, journal+"-log."), 10, 64)
		if err == nil {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	return ns, nil
}

// createLog makes log file n, holding only its header (not yet synced).
func createLog(journal string, n uint64) (*logFile, error) {
	f, err := os.OpenFile(logPath(journal, n), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	hdr := binary.BigEndian.AppendUint32([]byte(logMagic), logVersion)
	if _, err := f.Write(hdr); err != nil {
		f.Close()
		return nil, err
	}
	return &logFile{f: f, n: n, size: int64(len(hdr))}, nil
}

// encodeRecord frames one record.
func encodeRecord(kind byte, key string, value []byte) []byte {
	payload := make([]byte, 0, 1+binary.MaxVarintLen64+len(key)+len(value))
	payload = append(payload, kind)
	payload = binary.AppendUvarint(payload, uint64(len(key)))
	payload = append(payload, key...)
	payload = append(payload, value...)
	out := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint32(out, uint32(len(payload)))
	binary.BigEndian.PutUint32(out[4:], crc32.Checksum(payload, castagnoli))
	return append(out, payload...)
}

// logRecord is one record read back.
type logRecord struct {
	kind  byte
	key   string
	value []byte
}

// errTorn ends a log where a record is cut short or fails its checksum.
var errTorn = errors.New("torn record")

// readLog reads log file n of journal, calling fn for each record in
// order. It returns errTorn (wrapped) when it stopped before the file's
// end at a record that is incomplete or corrupt; a file shorter than its
// header is empty.
func readLog(journal string, n uint64, fn func(logRecord) error) error {
	f, err := os.Open(logPath(journal, n))
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	hdr := make([]byte, logHeader)
	if _, err := io.ReadFull(r, hdr); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // made, header never written
		}
		return fmt.Errorf("%s: header: %w", logPath(journal, n), errTorn)
	}
	if string(hdr[:len(logMagic)]) != logMagic {
		return fmt.Errorf("%s: header: %w", logPath(journal, n), errTorn)
	}
	if v := binary.BigEndian.Uint32(hdr[len(logMagic):]); v != logVersion {
		return fmt.Errorf("%s: log version %d, this kurmad reads %d", logPath(journal, n), v, logVersion)
	}
	off := int64(logHeader)
	var frame [8]byte
	for {
		if _, err := io.ReadFull(r, frame[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s at %d: %w", logPath(journal, n), off, errTorn)
		}
		size := binary.BigEndian.Uint32(frame[:])
		// The shortest payload is a kind and an empty key's length: a
		// zero-filled block (a size the file got before its data) is no
		// record.
		if size < 2 || size > maxRecord {
			return fmt.Errorf("%s at %d: %w", logPath(journal, n), off, errTorn)
		}
		payload := make([]byte, size)
		if _, err := io.ReadFull(r, payload); err != nil || crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(frame[4:]) {
			return fmt.Errorf("%s at %d: %w", logPath(journal, n), off, errTorn)
		}
		rec, ok := decodePayload(payload)
		if !ok {
			return fmt.Errorf("%s at %d: %w", logPath(journal, n), off, errTorn)
		}
		if err := fn(rec); err != nil {
			return fmt.Errorf("%s at %d: %w", logPath(journal, n), off, err)
		}
		off += int64(8 + size)
	}
}

func decodePayload(p []byte) (logRecord, bool) {
	kind := p[0]
	klen, n := binary.Uvarint(p[1:])
	if n <= 0 || uint64(len(p)-1-n) < klen || kind < kindPutPod || kind > kindDeleteGeneration {
		return logRecord{}, false
	}
	start := 1 + n
	return logRecord{kind: kind, key: string(p[start : start+int(klen)]), value: p[start+int(klen):]}, true
}

// syncDir makes the entries of dir (a log file made) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
