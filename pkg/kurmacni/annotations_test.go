package kurmacni

import (
	"bytes"
	"io"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// annotated is a conflist entry for mynet that declares the pod-annotations
// capability, as the runtime calls it for a pod with these annotations.
func annotated(sock string, annotations map[string]string) []byte {
	rc := map[string]any{PodAnnotationsCapability: annotations,
		"portMappings": []map[string]any{{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}}}
	return conf("1.0.0", sock, "mynet", map[string]any{"runtimeConfig": rc,
		"capabilities": map[string]bool{PodAnnotationsCapability: true, "portMappings": true}})
}

// TestAddAnnotatedNetworks: a pod's kurma.dev/networks annotation chooses
// its networks and their order (the first gets CNI_IFNAME); the pod
// annotations themselves go to no network, the other capability
// arguments go to each; without the annotation the config's network is
// used.
func TestAddAnnotatedNetworks(t *testing.T) {
	sock, b := serve(t)
	tests := []struct {
		name        string
		annotations map[string]string
		want        []string
	}{
		{"two networks, in the annotation's order", map[string]string{NetworksAnnotation: "other,mynet", "app": "web"}, []string{"other", "mynet"}},
		{"blanks around names", map[string]string{NetworksAnnotation: " other , mynet "}, []string{"other", "mynet"}},
		{"one network", map[string]string{NetworksAnnotation: "other"}, []string{"other"}},
		{"no annotation: the config's networks", map[string]string{"app": "web"}, []string{"mynet"}},
		{"no annotations at all", nil, []string{"mynet"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			a := cmdArgs(annotated(sock, tt.annotations), "annot", "eth0")
			a.Args = ""
			if err := newPlugin(&out).Add(a); err != nil {
				t.Fatal(err)
			}
			req := b.Created()[len(b.Created())-1]
			if !slices.Equal(req.Networks, tt.want) {
				t.Errorf("networks %q, want %q", req.Networks, tt.want)
			}
			for _, n := range tt.want {
				rc := req.RuntimeConfig[n]
				if _, ok := rc[PodAnnotationsCapability]; ok {
					t.Errorf("network %s got the pod's annotations: %s", n, rc[PodAnnotationsCapability])
				}
				if len(rc["portMappings"]) == 0 {
					t.Errorf("network %s lacks the portMappings capability argument: %v", n, rc)
				}
			}
			res := parse(t, out.Bytes(), "1.0.0")
			if len(res.Interfaces) != len(tt.want) || res.Interfaces[0].Name != "eth0" {
				t.Errorf("result interfaces %+v, the first named eth0", res.Interfaces)
			}
			if err := newPlugin(io.Discard).Del(a); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAddAnnotationErrors: an annotation naming a network kurmad lacks
// fails the ADD naming it (code 7) and creates no pod; a malformed one
// fails before kurmad is asked, naming the annotation.
func TestAddAnnotationErrors(t *testing.T) {
	sock, b := serve(t)
	tests := []struct {
		name, value string
		msg         string
	}{
		{"unknown network", "mynet,nope", `unknown network "nope"`},
		{"empty", " ", NetworksAnnotation + `=" ": names no network`},
		{"empty entry", "mynet,,other", "entry 1 is empty"},
		{"a bad name", "mynet,no/pe", `"no/pe" is not a kurma network's name`},
		{"twice", "mynet,other,mynet", `"mynet" is listed twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(b.Created())
			a := cmdArgs(annotated(sock, map[string]string{NetworksAnnotation: tt.value}), "annoterr", "eth0")
			checkCNIError(t, newPlugin(io.Discard).Add(a), types.ErrInvalidNetworkConfig, tt.msg)
			pods, err := b.ListPods(t.Context())
			if err != nil || len(pods) != 0 {
				t.Errorf("pods after the failed ADD: %+v (%v)", pods, err)
			}
			if tt.name != "unknown network" && len(b.Created()) != before {
				t.Errorf("kurmad was asked to create %+v for a malformed annotation", b.Created()[before:])
			}
		})
	}
	bad := conf("1.0.0", sock, "mynet", map[string]any{"runtimeConfig": map[string]any{PodAnnotationsCapability: []string{"x"}}})
	checkCNIError(t, newPlugin(io.Discard).Add(cmdArgs(bad, "annoterr", "eth0")), types.ErrInvalidNetworkConfig, PodAnnotationsCapability)
}
