package schema

import (
	"encoding/json"
	"testing"
)

// appendString's fast path must write exactly what json.Marshal writes.
func TestAppendStringMatchesJSONMarshal(t *testing.T) {
	inputs := []string{"", "tenant-1", "item 42", "a\"b", `a\b`, "<&>", "é", "\u2028", "x\x00y", "tab\there", "~!@#$%^*()_+{}|:?"}
	for c := 0; c < 256; c++ {
		inputs = append(inputs, string([]byte{byte(c)}), "ab"+string([]byte{byte(c)}))
	}
	for _, s := range inputs {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("appendString(%q) = %s, json.Marshal = %s", s, got, want)
		}
	}
}
