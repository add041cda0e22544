package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tidemark/tidemark/status"
)

// alertRules is the part of compose/prometheus/alerts.yml the runbook test
// reads.
type alertRules struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `json:"alert"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// anchor is the fragment GitHub (and most Markdown renderers) give a
// heading: lower case, punctuation other than '-' dropped, spaces as '-'.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

var heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)

// TestRunbookLinks: every alert has a runbook_url into docs/operations.md
// and the section it names exists; every status verdict has its section.
func TestRunbookLinks(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(string(doc), -1) {
		sections[anchor(m[1])] = true
	}
	raw, err := os.ReadFile("../../compose/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			u := r.Annotations["runbook_url"]
			doc, frag, ok := strings.Cut(u, "#")
			if !ok || doc != "docs/operations.md" {
				t.Errorf("alert %s: runbook_url %q, want docs/operations.md#<section>", r.Alert, u)
				continue
			}
			if !sections[frag] {
				t.Errorf("alert %s: runbook_url %q names no section of docs/operations.md", r.Alert, u)
			}
		}
	}
	if n < 12 {
		t.Fatalf("read %d alerts from alerts.yml, want at least 12: the parsing is broken", n)
	}
	// Every verdict status.Check can give has a section.
	for _, v := range []string{status.OK, status.AtRisk, status.Breached, "STALLED partition", "Status unreadable (exit 2)"} {
		if !sections[anchor(v)] {
			t.Errorf("docs/operations.md has no section %q (#%s)", v, anchor(v))
		}
	}
	// Every in-document link resolves.
	for _, m := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(string(doc), -1) {
		if !sections[m[1]] {
			t.Errorf("docs/operations.md links to #%s, which is no section", m[1])
		}
	}
}
