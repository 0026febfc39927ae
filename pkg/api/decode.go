package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"unicode"
)

// MaxBodySize caps request bodies: the largest legitimate request is
// a pod create with a handful of network references.
const MaxBodySize = 1 << 20

// readBody reads the whole request body, refusing more than limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *Error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, Errorf(CodeBadRequest, "request body too large: the limit is %d bytes", limit)
		}
		return nil, Errorf(CodeBadRequest, "reading request body: %v", err)
	}
	return data, nil
}

// decodeStrict decodes data, which must be exactly one JSON object, into v
// (a pointer to a struct), refusing unknown fields and values of the wrong
// type with a message that names the field.
func decodeStrict(data []byte, v any) *Error {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return Errorf(CodeBadRequest, "request body is empty: expected a JSON object")
	}
	if trimmed[0] != '{' {
		return Errorf(CodeBadRequest, "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return describeDecodeError(err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(CodeBadRequest, "unexpected data after the JSON object ending at offset %d", end)
	}
	if name, in := unknownField(data[:end], reflect.TypeOf(v), ""); name != "" {
		msg := fmt.Sprintf("unknown field %q", name)
		if known := fieldNames(reflect.New(in).Interface()); len(known) > 0 {
			msg += " (known fields: " + strings.Join(known, ", ") + ")"
		}
		return Errorf(CodeBadRequest, "%s", msg)
	}
	return nil
}

// unknownField finds, in valid JSON data decoded into type t, the first key
// (in sorted order, so the answer is stable) that names no field of its
// struct, looking into nested structs, lists and maps of them as
// encoding/json does; it returns the key's dotted path (prefixed by path)
// and the struct type it is missing from, or "".
func unknownField(data []byte, t reflect.Type, path string) (string, reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType {
		return "", nil // kept as sent: any keys
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		var items []json.RawMessage
		if json.Unmarshal(data, &items) != nil {
			return "", nil
		}
		for _, item := range items {
			if name, in := unknownField(item, t.Elem(), path); name != "" {
				return name, in
			}
		}
	case reflect.Map:
		var values map[string]json.RawMessage
		if json.Unmarshal(data, &values) != nil {
			return "", nil
		}
		for _, k := range slices.Sorted(maps.Keys(values)) {
			if name, in := unknownField(values[k], t.Elem(), join(path, k)); name != "" {
				return name, in
			}
		}
	case reflect.Struct:
		var members map[string]json.RawMessage
		if json.Unmarshal(data, &members) != nil {
			return "", nil
		}
		for _, k := range slices.Sorted(maps.Keys(members)) {
			f, ok := jsonField(t, k)
			if !ok {
				return join(path, k), t
			}
			if name, in := unknownField(members[k], f.Type, join(path, k)); name != "" {
				return name, in
			}
		}
	}
	return "", nil
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// jsonField is the field of struct t that encoding/json decodes key into:
// the exact name, else one equal under case folding.
func jsonField(t reflect.Type, key string) (reflect.StructField, bool) {
	var folded reflect.StructField
	found := false
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key || f.Tag.Get("deprecated") == key {
			return f, true
		}
		if !found && strings.EqualFold(name, key) {
			folded, found = f, true
		}
	}
	return folded, found
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func describeDecodeError(err error) *Error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var ae *Error
	switch {
	case errors.As(err, &ae):
		return ae // a type's own UnmarshalJSON said what is wrong
	case errors.As(err, &syntax):
		return Errorf(CodeBadRequest, "malformed JSON at offset %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return Errorf(CodeBadRequest, "truncated JSON: the body ends inside the object")
	case errors.As(err, &typ):
		if typ.Field == "" {
			return Errorf(CodeBadRequest, "request body must be a JSON object")
		}
		return Errorf(CodeBadRequest, "field %q: expected %s, got JSON %s", typ.Field, kindName(typ.Type), typ.Value)
	default:
		return Errorf(CodeBadRequest, "invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
}

// kindName describes a Go type the way a JSON user thinks of it.
func kindName(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(kindName(t.Elem()), "a "), "an ") + "s"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return kindName(t.Elem())
	}
	return t.String()
}

// fieldNames lists the JSON names of the struct v points to.
func fieldNames(v any) []string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

// decodeCreatePod decodes and validates the body of POST /v1/pods.
func decodeCreatePod(data []byte) (CreatePodRequest, *Error) {
	var req CreatePodRequest
	if err := decodeStrict(data, &req); err != nil {
		return CreatePodRequest{}, err
	}
	if err := checkText("name", req.Name, 253); err != nil {
		return CreatePodRequest{}, err
	}
	for i, n := range req.Networks {
		field := fmt.Sprintf("networks[%d]", i)
		if strings.TrimSpace(n) == "" {
			return CreatePodRequest{}, Errorf(CodeBadRequest, "field %q: empty network reference", field)
		}
		if err := checkText(field, n, 4096); err != nil {
			return CreatePodRequest{}, err
		}
	}
	if err := checkRuntimeConfig(req.RuntimeConfig); err != nil {
		return CreatePodRequest{}, err
	}
	if err := checkInterfaces(req.Interfaces); err != nil {
		return CreatePodRequest{}, err
	}
	if err := checkRuntime(req.Runtime); err != nil {
		return CreatePodRequest{}, err
	}
	return req, nil
}

// decodePull decodes and validates the body of POST /v1/images.
func decodePull(data []byte) (PullRequest, *Error) {
	var req PullRequest
	if err := decodeStrict(data, &req); err != nil {
		return PullRequest{}, err
	}
	if strings.TrimSpace(req.URI) == "" {
		return PullRequest{}, Errorf(CodeBadRequest, "field \"uri\" is required")
	}
	if err := checkText("uri", req.URI, 4096); err != nil {
		return PullRequest{}, err
	}
	return req, nil
}

// checkText refuses control characters (they would garble logs and tables)
// and values longer than max bytes.
func checkText(field, s string, max int) *Error {
	if len(s) > max {
		return Errorf(CodeBadRequest, "field %q: longer than %d bytes", field, max)
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		return Errorf(CodeBadRequest, "field %q: control character at byte %d", field, i)
	}
	return nil
}
