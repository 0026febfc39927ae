package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/flannel-io/flannel/pkg/subnet"
)

// The flags pkg/cniwrap, TestAllowlistsCoverFlanneld and test/k8s pass
// parse as they mean; an unset flag comes from FLANNELD_<NAME> (cniwrap's
// tests give --kube-api-url so), a set one wins over it.
func TestParseFlags(t *testing.T) {
	t.Setenv("FLANNELD_KUBE_API_URL", "http://10.0.0.1:6443")
	t.Setenv("FLANNELD_SUBNET_FILE", "/from/env")
	o, err := parseFlags([]string{"--kube-subnet-mgr", "--net-config-path=/d/net-conf.json",
		"--subnet-file=/d/subnet.env", "--ip-masq", "--iface=eth0", "--iface=10.0.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	if !o.kubeSubnetMgr || !o.ipMasq || o.netConfPath != "/d/net-conf.json" || o.subnetFile != "/d/subnet.env" ||
		!slices.Equal(o.ifaces, []string{"eth0", "10.0.0.2"}) || o.kubeAPIURL != "http://10.0.0.1:6443" {
		t.Errorf("cniwrap's flags: %+v", o)
	}

	o, err = parseFlags([]string{"--etcd-endpoints=http://10.209.0.1:2379", "--etcd-prefix=/kt", "--ip-masq=false"})
	if err != nil {
		t.Fatal(err)
	}
	if o.kubeSubnetMgr || o.ipMasq || o.etcdEndpoints != "http://10.209.0.1:2379" || o.etcdPrefix != "/kt" || o.subnetFile != "/from/env" {
		t.Errorf("etcd flags: %+v", o)
	}

	for _, args := range [][]string{{"--iface-regex=eth.*"}, {"--public-ip=10.0.0.2"}, {"extra"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v: no error (this flanneld does not have it)", args)
		}
	}
}

// A network config this flanneld cannot serve fails, naming the field.
func TestCheckConfig(t *testing.T) {
	for _, tc := range []struct {
		conf string
		want string // "" for valid
	}{
		{`{"Network":"10.244.0.0/16","EnableNFTables":true,"Backend":{"Type":"vxlan"}}`, ""},
		{`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","EnableNFTables":true,"Backend":{"Type":"host-gw"}}`, ""},
		{`{"Network":"10.244.0.0/16","EnableNFTables":true,"Backend":{"Type":"VXLAN"}}`, ""},
		{`{"Network":"10.244.0.0/16","EnableNFTables":true,"Backend":{"Type":"wireguard"}}`, "Backend.Type"},
		{`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`, "EnableNFTables"},
	} {
		conf, err := subnet.ParseConfig(tc.conf)
		if err != nil {
			t.Fatalf("%s: %v", tc.conf, err)
		}
		err = checkConfig(conf)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want an error naming %q", tc.conf, err, tc.want)
		}
	}
}
