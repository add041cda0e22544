package telemetry

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// A logger derived from a component's (the relay's Kafka client, as
// kafkaconn builds it) writes one "component" key naming both, in JSON and
// in text; a group opened after it does not swallow it.
func TestOneComponentKeyPerLine(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	relay := log.With("component", "relay", "topic", "t")
	relay.With("component", "kafka-client").Info("produced", "n", 1)
	relay.WithGroup("req").Info("grouped", "id", 7)
	log.Info("plain")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"relay.kafka-client", "relay", ""}
	for i, line := range lines {
		if n := strings.Count(line, `"component"`); n > 1 {
			t.Errorf("line %d has %d component keys: %s", i, n, line)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		got, _ := m["component"].(string)
		if got != want[i] {
			t.Errorf("line %d: component %q, want %q: %s", i, got, want[i], line)
		}
		if i < 2 && m["topic"] != "t" {
			t.Errorf("line %d lost the relay's other attributes: %s", i, line)
		}
	}
	buf.Reset()
	text, _ := NewLogger(&buf, "text", "info")
	text.With("component", "relay").With("component", "kafka-client").Info("x")
	if got := buf.String(); strings.Count(got, "component=") != 1 || !strings.Contains(got, "component=relay.kafka-client") {
		t.Errorf("text line: %s", got)
	}
}
