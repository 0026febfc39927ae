package testutil

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// Manifest is a Kubernetes manifest of deploy/kubernetes, as its objects,
// for tests of what ships: they read its config and commands rather than
// copies of them.
type Manifest struct {
	Path    string
	Objects []map[string]any
}

// ReadManifest reads the YAML documents of the manifest at path.
func ReadManifest(t testing.TB, path string) *Manifest {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := &Manifest{Path: path}
	dec := yaml.NewDecoder(f)
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if obj != nil {
			m.Objects = append(m.Objects, obj)
		}
	}
	return m
}

// Object is the object of that kind and name, failing t when there is
// none.
func (m *Manifest) Object(t testing.TB, kind, name string) map[string]any {
	t.Helper()
	for _, o := range m.Objects {
		md, _ := o["metadata"].(map[string]any)
		if o["kind"] == kind && md["name"] == name {
			return o
		}
	}
	t.Fatalf("%s has no %s %s", m.Path, kind, name)
	return nil
}

// ConfigMapData is the data of the ConfigMap name.
func (m *Manifest) ConfigMapData(t testing.TB, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	data, _ := m.Object(t, "ConfigMap", name)["data"].(map[string]any)
	for k, v := range data {
		s, _ := v.(string)
		out[k] = s
	}
	return out
}

// Command is the command of the container named container in the
// DaemonSet name.
func (m *Manifest) Command(t testing.TB, daemonSet, container string) []string {
	t.Helper()
	ds := m.Object(t, "DaemonSet", daemonSet)
	spec := dig(ds, "spec", "template", "spec")
	cs, _ := spec["containers"].([]any)
	for _, c := range cs {
		cm, _ := c.(map[string]any)
		if cm["name"] != container {
			continue
		}
		cmd, _ := cm["command"].([]any)
		var out []string
		for _, a := range cmd {
			s, _ := a.(string)
			out = append(out, s)
		}
		return out
	}
	t.Fatalf("%s: DaemonSet %s has no container %s", m.Path, daemonSet, container)
	return nil
}

// Flag is the value of --name=value in cmd, "" when absent.
func Flag(cmd []string, name string) string {
	for _, a := range cmd {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// Rules are the rules of the ClusterRole name, each as "resource:verb"
// pairs for the core group ("" API group).
func (m *Manifest) Rules(t testing.TB, kind, name string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	rules, _ := m.Object(t, kind, name)["rules"].([]any)
	for _, r := range rules {
		rm, _ := r.(map[string]any)
		groups, _ := rm["apiGroups"].([]any)
		res, _ := rm["resources"].([]any)
		verbs, _ := rm["verbs"].([]any)
		for _, g := range groups {
			for _, rs := range res {
				for _, v := range verbs {
					prefix := ""
					if g != "" {
						prefix = g.(string) + "/"
					}
					out[prefix+rs.(string)+":"+v.(string)] = true
				}
			}
		}
	}
	return out
}

func dig(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m, _ = m[k].(map[string]any)
	}
	return m
}
