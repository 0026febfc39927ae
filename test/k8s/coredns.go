package k8stest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// coreDNSManifest is the cluster DNS as kubeadm installs it (CoreDNS in
// kube-system, labelled k8s-app=kube-dns, behind the kube-dns Service at
// ClusterDNSIP), with what this machine allows: no upstream to forward to
// (no network leaves it), so names outside the cluster domain fail fast
// instead of looping back to the node's resolver (127.0.0.1).
const coreDNSManifest = `apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health {
            lameduck 5s
        }
        ready
        kubernetes __DOMAIN__ in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }
        cache 30
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: __REPLICAS__
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      priorityClassName: system-cluster-critical
      tolerations: [{key: CriticalAddonsOnly, operator: Exists}]
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                labelSelector: {matchLabels: {k8s-app: kube-dns}}
                topologyKey: kubernetes.io/hostname
      containers:
        - name: coredns
          image: __IMAGE__
          imagePullPolicy: IfNotPresent
          args: ["-conf", "/etc/coredns/Corefile"]
          ports:
            - {containerPort: 53, name: dns, protocol: UDP}
            - {containerPort: 53, name: dns-tcp, protocol: TCP}
            - {containerPort: 9153, name: metrics, protocol: TCP}
          readinessProbe:
            httpGet: {path: /ready, port: 8181}
            periodSeconds: 2
          livenessProbe:
            httpGet: {path: /health, port: 8080}
            initialDelaySeconds: 30
          volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes:
        - name: config
          configMap: {name: coredns, items: [{key: Corefile, path: Corefile}]}
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: __DNS_IP__
  ports:
    - {name: dns, port: 53, protocol: UDP}
    - {name: dns-tcp, port: 53, protocol: TCP}
    - {name: metrics, port: 9153, protocol: TCP}
`

// DeployCoreDNS applies the cluster DNS (CoreDNSImage must be imported:
// BuildE2EImages) and waits until it answers: its Deployment available
// with one replica per node (at most two).
func DeployCoreDNS(ctx context.Context, c *Cluster) error {
	replicas := min(len(c.Nodes), 2)
	doc := strings.NewReplacer("__DOMAIN__", ClusterDomain, "__REPLICAS__", fmt.Sprint(replicas),
		"__IMAGE__", CoreDNSImage, "__DNS_IP__", ClusterDNSIP).Replace(coreDNSManifest)
	path := filepath.Join(c.Dir, "coredns.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "apply", "-f", path); err != nil {
		return err
	}
	_, err := c.Kubectl(ctx, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=3m")
	return err
}

// DeleteCoreDNS removes what DeployCoreDNS made and waits for its pods to
// be gone (their sandboxes' teardown runs through the network of the
// side that made them).
func DeleteCoreDNS(ctx context.Context, c *Cluster) error {
	path := filepath.Join(c.Dir, "coredns.yaml")
	if _, err := c.Kubectl(ctx, "delete", "--ignore-not-found", "--wait=true", "--timeout=3m", "-f", path); err != nil {
		return err
	}
	return c.waitFor(ctx, 3*time.Minute, "CoreDNS's pods to be gone", "", func() error {
		out, err := c.Kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "name")
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(out); s != "" {
			return fmt.Errorf("still there: %s", s)
		}
		return nil
	})
}
