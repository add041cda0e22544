package localserver

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A cluster's description reads back as written, attaches without owning
// the nodes (Start refuses, Remove deletes nothing), and a file that
// describes no usable cluster is refused by name.
func TestKafkaInfoRoundTripAndAttach(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cluster.json")
	k := &Kafka{}
	for i, port := range []string{"1", "2", "3"} {
		k.Nodes = append(k.Nodes, &KafkaNode{ID: int32(i + 1), Addr: "127.0.0.1:900" + port, ControllerAddr: "127.0.0.1:910" + port, SASLAddr: "127.0.0.1:920" + port})
	}
	certs := &Certs{CA: "/ca.pem", ClientCert: "/client.pem", ClientKey: "/client.key"}
	if err := WriteKafkaInfo(path, k.Info(certs)); err != nil {
		t.Fatal(err)
	}
	info, err := ReadKafkaInfo(path)
	if err != nil {
		t.Fatal(err)
	}
	a := AttachKafka(info)
	if !slices.Equal(a.Brokers(), k.Brokers()) || !slices.Equal(a.SASLBrokers(), k.SASLBrokers()) || *info.Certs != *certs {
		t.Fatalf("read back %+v, certificates %+v; want the brokers %v, %v and %+v", info.Nodes, info.Certs, k.Brokers(), k.SASLBrokers(), certs)
	}
	if err := a.Node(2).Start(); err == nil || a.Node(2).Running() {
		t.Fatalf("an attached node started (%v): it belongs to another process", err)
	}
	a.Remove()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("Remove on an attached cluster deleted files: %v", err)
	}

	for name, body := range map[string]string{"empty": "", "no nodes": `{"nodes": []}`, "no address": `{"nodes": [{"id": 1}]}`} {
		bad := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(bad, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadKafkaInfo(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: ReadKafkaInfo = %v, want an error naming the file", name, err)
		}
	}
}
