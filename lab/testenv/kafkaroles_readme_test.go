package testenv_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/lab/testenv"
)

// The README's Kafka ACL table is the one the test above grants.
func TestREADMEKafkaACLTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		for _, role := range []string{testenv.RoleCapture, testenv.RoleApply, testenv.RoleReplay, testenv.RoleStatus} {
			if _, seen := rows[role]; !seen && (strings.HasPrefix(line, "| "+role+" ") || strings.HasPrefix(line, "| "+role+",")) { // the ACL table comes before the MSK IAM policy table
				rows[role] = line
			}
		}
	}
	cells := regexp.MustCompile(`\s*\|\s*`)
	cols := []string{"<topic>", "<topic>.capture", "<topic>.dlq", "<group>"}
	for _, role := range []string{testenv.RoleCapture, testenv.RoleApply, testenv.RoleReplay, testenv.RoleStatus} {
		row, ok := rows[role]
		if !ok {
			t.Errorf("README.md has no row for role %s in the Kafka ACL table", role)
			continue
		}
		c := cells.Split(strings.Trim(row, "| "), -1)
		for _, a := range testenv.KafkaRoleACLs(role, "<topic>", "<group>") {
			col := slices.Index(cols, a.Name)
			if col < 0 || col+1 >= len(c) || !strings.Contains(c[col+1], opName(a.Op.String())) {
				t.Errorf("README.md's %s row does not give %s on %s: %q", role, opName(a.Op.String()), a.Name, row)
			}
		}
	}
}

// opName is how the README writes an operation (DESCRIBE_CONFIGS:
// DescribeConfigs).
func opName(op string) string {
	var b strings.Builder
	for _, w := range strings.Split(op, "_") {
		b.WriteString(w[:1] + strings.ToLower(w[1:]))
	}
	return b.String()
}
