package k8snode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// The install's Networks. `kubectl apply -f` of kurma's manifest is the
// whole install, and the cluster network is a Network object; but kubectl
// cannot create an object of a CRD the same apply installs. So the
// manifest carries its Networks in the ConfigMap (networks.yaml), and
// every node's kurma-node creates those missing when it starts, before
// kurmad's config is first written. From then on the objects are the
// truth: an edit of the object changes the network, one of the file does
// not (but for a Network deleted since, which comes back at the next
// start of a kurma pod).

// ReadNetworks reads Network objects from r: YAML or JSON documents, each
// a Network (kurma.dev/v1alpha1).
func ReadNetworks(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if obj == nil {
			continue // an empty document
		}
		u := &unstructured.Unstructured{Object: obj}
		if gv := u.GroupVersionKind(); gv.Group != NetworkGroup || gv.Version != NetworkVersion || gv.Kind != "Network" || u.GetName() == "" {
			return nil, fmt.Errorf("document %d: %s %q is not a named Network of %s/%s", i, u.GetKind(), u.GetName(), NetworkGroup, NetworkVersion)
		}
		out = append(out, u)
	}
}

// CreateMissing creates the Networks of file that do not exist (any
// node's kurma-node may have made them first: that is no error), trying
// each again up to timeout while the API server does not serve Networks
// yet, then waits up to timeout for the informer to hold each, so that
// kurmad's first config has them.
func (w *NetworkWatcher) CreateMissing(ctx context.Context, file string, timeout time.Duration) error {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	objs, err := ReadNetworks(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var errs []error
	var names []string
	for _, o := range objs {
		names = append(names, o.GetName())
		if _, ok, _ := w.networks.GetStore().GetByKey(o.GetName()); ok {
			continue
		}
		// The CRD comes with the same kubectl apply as this pod: until the
		// API server serves it, a create is NotFound, and is tried again.
		var notServed error
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			_, err := w.dyn.Resource(NetworkGVR).Create(ctx, o, metav1.CreateOptions{FieldManager: "kurma-node"})
			switch {
			case err == nil:
				w.Log.WithField("network", o.GetName()).Info("created the install's Network")
				return true, nil
			case apierrors.IsAlreadyExists(err):
				return true, nil
			case apierrors.IsNotFound(err):
				notServed = err
				return false, nil
			}
			return false, err
		})
		if err != nil && notServed != nil {
			err = fmt.Errorf("%w (the API server does not serve Networks yet: %v)", err, notServed)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("Network %q: %w", o.GetName(), err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		for _, n := range names {
			if _, ok, _ := w.networks.GetStore().GetByKey(n); !ok {
				return false, nil
			}
		}
		return true, nil
	})
}

// NetworkObjectOf reads a Network object as kurma-node does.
func NetworkObjectOf(u *unstructured.Unstructured) (*NetworkObject, error) {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	var n NetworkObject
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// ShippedConfig is kurmad's config as kurma-node first writes it on a
// node (in) from a manifest's ConfigMap: its template (kurmad.json) with
// the Network objects of its networks.yaml, each rendered for the node;
// an object refused is an error naming it.
func ShippedConfig(template, networks []byte, in Input, baseDir string) ([]byte, error) {
	base, err := Render(template, in)
	if err != nil {
		return nil, fmt.Errorf("kurmad.json: %w", err)
	}
	us, err := ReadNetworks(bytes.NewReader(networks))
	if err != nil {
		return nil, fmt.Errorf("networks.yaml: %w", err)
	}
	var objs []*NetworkObject
	images := map[string]string{}
	for _, u := range us {
		o, err := NetworkObjectOf(u)
		if err != nil {
			return nil, fmt.Errorf("networks.yaml: %s: %w", u.GetName(), err)
		}
		objs = append(objs, o)
		images[o.Metadata.Name] = o.Spec.Image
	}
	m, err := MergeNetworks(MergeInput{Base: base, Objects: objs, Images: images, BaseDir: baseDir,
		Render: func(_ *NetworkObject, entry []byte) ([]byte, error) { return Render(entry, in) }})
	if err != nil {
		return nil, err
	}
	for name, st := range m.Refused {
		return nil, fmt.Errorf("networks.yaml: Network %q: %s: %s", name, st.State, st.Reason)
	}
	return m.Config, nil
}
