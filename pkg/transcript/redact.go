package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
)

// Redacted replaces the value of every redacted key.
const Redacted = `"[redacted]"`

// Redact returns the JSON document b with the value of every object member
// whose key is one of keys (exactly, at any depth, whatever the value's
// type) replaced by Redacted; every other byte stays as it was, whitespace
// and order included. A b that is not JSON is returned whole only when it
// holds none of the keys' texts, and else replaced by a note: a secret is
// never kept because its document could not be read.
func Redact(b []byte, keys []string) []byte {
	if len(keys) == 0 {
		return b
	}
	spans, err := redactSpans(b, keys)
	if err != nil || !json.Valid(b) {
		for _, k := range keys {
			if bytes.Contains(b, []byte(k)) {
				return []byte("[redacted: not JSON, and it holds a redact_keys key]")
			}
		}
		return b
	}
	if len(spans) == 0 {
		return b
	}
	var out bytes.Buffer
	var last int64
	for _, s := range spans {
		out.Write(b[last:s[0]])
		out.WriteString(Redacted)
		last = s[1]
	}
	out.Write(b[last:])
	return out.Bytes()
}

// frame is one open object or array of the walk; in an object, key says
// that its next token is a key.
type frame struct{ obj, key bool }

// redactSpans returns the byte ranges of the values to replace, in order.
func redactSpans(b []byte, keys []string) ([][2]int64, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []frame
	var spans [][2]int64
	// valueSeen moves the enclosing object on to its next key.
	valueSeen := func() {
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].key = true
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				valueSeen()
				stack = append(stack, frame{obj: d == '{', key: d == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		}
		n := len(stack)
		if n == 0 || !stack[n-1].obj || !stack[n-1].key {
			valueSeen()
			continue
		}
		stack[n-1].key = false // a key: its value comes next
		if k, _ := tok.(string); !slices.Contains(keys, k) {
			continue
		}
		start := valueStart(b, dec.InputOffset())
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		spans = append(spans, [2]int64{start, dec.InputOffset()})
		stack[n-1].key = true
	}
	return spans, nil
}

// valueStart is where the value after a key ending at off begins: past
// whitespace, the colon and whitespace.
func valueStart(b []byte, off int64) int64 {
	for off < int64(len(b)) {
		switch b[off] {
		case ' ', '\t', '\n', '\r', ':':
			off++
		default:
			return off
		}
	}
	return off
}
