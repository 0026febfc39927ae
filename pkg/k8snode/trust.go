package k8snode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kurma-project/kurma/pkg/imagefetch"
)

// TrustDirName is the directory, beside kurmad's config, where kurma-node
// writes the Networks' trust (spec.trust) for kurmad to read.
const TrustDirName = "network-trust"

// ErrTrust is wrapped by every refusal of a Network's spec.trust.
var ErrTrust = errors.New("spec.trust")

// source is where a Network's spec.trust comes from: "Secret" or
// "ConfigMap", its name and key.
func (t *NetworkTrust) source() (kind, name, key string, err error) {
	switch {
	case (t.SecretRef == nil) == (t.ConfigMapRef == nil):
		return "", "", "", fmt.Errorf("%w: set exactly one of secretRef and configMapRef", ErrTrust)
	case t.SecretRef != nil:
		return "Secret", t.SecretRef.Name, t.SecretRef.Key, nil
	default:
		return "ConfigMap", t.ConfigMapRef.Name, t.ConfigMapRef.Key, nil
	}
}

// CheckTrust says what is wrong with data as a spec.trust of kind, as
// kurmad would read it: nil when kurmad takes it.
func CheckTrust(kind string, data []byte) error {
	switch kind {
	case TrustAppcKey:
		ring, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("not an armored OpenPGP public key: %w", err)
		}
		if len(ring) == 0 {
			return errors.New("holds no key")
		}
		return nil
	case TrustPolicy:
		if err := imagefetch.CheckPolicy(data); err != nil {
			return fmt.Errorf("not a containers-policy.json kurmad takes: %w", err)
		}
		return nil
	}
	return fmt.Errorf("kind %q: want %q or %q", kind, TrustAppcKey, TrustPolicy)
}

// trustPrefix is the prefix of the key o trusts: spec.trust.prefix, else
// spec.imageName; one is needed, or the key would sign any name.
func (o *NetworkObject) trustPrefix() (string, error) {
	if p := o.Spec.Trust.Prefix; p != "" {
		return p, nil
	}
	if o.Spec.ImageName != "" {
		return o.Spec.ImageName, nil
	}
	return "", fmt.Errorf("%w.prefix: an appcKey needs the names it may sign: set spec.trust.prefix or spec.imageName", ErrTrust)
}

// trustFile writes o's spec.trust, read from its Secret or ConfigMap in
// kurma's namespace and checked, into dir: its file is named by the
// object and the content's digest, so that new content is a new path and
// so a config change that kurmad reloads.
func (w *NetworkWatcher) trustFile(ctx context.Context, o *NetworkObject, dir string) (TrustFile, error) {
	t := o.Spec.Trust
	kind, name, key, err := t.source()
	if err != nil {
		return TrustFile{}, err
	}
	tf := TrustFile{Kind: t.Kind}
	if t.Kind == TrustAppcKey {
		if tf.Prefix, err = o.trustPrefix(); err != nil {
			return TrustFile{}, err
		}
	}
	where := fmt.Sprintf("%s %s/%s, key %s", kind, w.Namespace, name, key)
	var data []byte
	var found bool
	if kind == "Secret" {
		s, gerr := w.cs.CoreV1().Secrets(w.Namespace).Get(ctx, name, metav1.GetOptions{})
		err = gerr
		if err == nil {
			data, found = s.Data[key]
		}
	} else {
		c, gerr := w.cs.CoreV1().ConfigMaps(w.Namespace).Get(ctx, name, metav1.GetOptions{})
		err = gerr
		if err == nil {
			var s string
			if s, found = c.Data[key]; found {
				data = []byte(s)
			} else {
				data, found = c.BinaryData[key]
			}
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		return TrustFile{}, fmt.Errorf("%w: %s: no such %s", ErrTrust, where, kind)
	case err != nil:
		return TrustFile{}, fmt.Errorf("%w: %s: %w", ErrTrust, where, err)
	case !found:
		return TrustFile{}, fmt.Errorf("%w: %s: the %s has no such key", ErrTrust, where, kind)
	}
	if err := CheckTrust(t.Kind, data); err != nil {
		return TrustFile{}, fmt.Errorf("%w: %s: %w", ErrTrust, where, err)
	}
	ext := ".asc"
	if t.Kind == TrustPolicy {
		ext = ".policy.json"
	}
	tf.Path = filepath.Join(dir, fmt.Sprintf("%s-%x%s", o.Metadata.Name, sha256.Sum256(data), ext))
	if _, err := os.Stat(tf.Path); err == nil {
		return tf, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return TrustFile{}, err
	}
	if err := writeAtomic(tf.Path, bytes.NewReader(data), 0o600); err != nil {
		return TrustFile{}, err
	}
	return tf, nil
}

// trustFiles are the objects' spec.trust as files in the trust
// directory, by name, and the objects whose trust cannot be had, with
// why; files no object names any more are removed.
func (w *NetworkWatcher) trustFiles(ctx context.Context, objs []*NetworkObject) (map[string]TrustFile, map[string]error) {
	dir := filepath.Join(w.BaseDir, TrustDirName)
	files, bad := map[string]TrustFile{}, map[string]error{}
	keep := map[string]bool{}
	for _, o := range objs {
		if o.Spec.Trust == nil {
			continue
		}
		tf, err := w.trustFile(ctx, o, dir)
		if err != nil {
			bad[o.Metadata.Name] = err
			continue
		}
		files[o.Metadata.Name], keep[filepath.Base(tf.Path)] = tf, true
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !keep[e.Name()] && !strings.HasPrefix(e.Name(), ".") {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return files, bad
}
