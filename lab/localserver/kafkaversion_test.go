package localserver

import (
	"os"
	"strings"
	"testing"
)

// compose/ runs the Kafka version the real-Kafka tests run.
func TestComposeKafkaVersion(t *testing.T) {
	b, err := os.ReadFile("../../compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := "image: apache/kafka:" + KafkaVersion; !strings.Contains(string(b), want) {
		t.Fatalf("compose/compose.yaml does not say %q: keep it on the tested version", want)
	}
}
