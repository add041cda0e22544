package localserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A cluster id starting with '-' is read by the storage tool as an option:
// a new id never starts with it, and a stored one that does is replaced.
func TestClusterIDNeverStartsWithDash(t *testing.T) {
	dir := t.TempDir()
	k := &Kafka{Nodes: []*KafkaNode{{dir: filepath.Join(dir, "node-1")}}}
	stored := filepath.Join(dir, "cluster-id")
	for i := range 2000 { // about 31 of 2000 raw ids start with '-'
		if err := os.Remove(stored); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		id, err := k.clusterID()
		if err != nil {
			t.Fatal(err)
		}
		if len(id) != 22 || strings.HasPrefix(id, "-") {
			t.Fatalf("id %d: %q", i, id)
		}
	}
	if err := os.WriteFile(stored, []byte("-AAAAAAAAAAAAAAAAAAAAA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, err := k.clusterID(); err != nil || strings.HasPrefix(id, "-") {
		t.Fatalf("a stored id starting with '-' was kept: %q %v", id, err)
	}
}
