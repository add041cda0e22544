package kafkaconn

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/tlsfiles"
)

// AWS_MSK_IAM cannot be run against MSK here; what can be checked is the
// SASL payload a broker would get: signed (SigV4) with credentials the
// standard AWS chain found in the environment, for the broker's host and
// region, with the session token of temporary (role) credentials.
func TestAWSMSKIAMSignsWithTheStandardChain(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEY")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example-secret")
	t.Setenv("AWS_SESSION_TOKEN", "example-session-token")
	t.Setenv("AWS_REGION", "eu-west-1")
	// Nothing but the environment: no shared files, no instance metadata.
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	mech, err := Config{SASLMechanism: AWSMSKIAM, TLS: tlsfiles.Config{Enabled: true}}.mechanism()
	if err != nil {
		t.Fatal(err)
	}
	if mech.Name() != "AWS_MSK_IAM" {
		t.Fatalf("mechanism %q, want AWS_MSK_IAM", mech.Name())
	}
	const host = "b-1.tidemark.abc123.c2.kafka.eu-west-1.amazonaws.com"
	_, msg, err := mech.Authenticate(context.Background(), host+":9098")
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]string
	if err := json.Unmarshal(msg, &p); err != nil {
		t.Fatalf("payload %s: %v", msg, err)
	}
	for k, want := range map[string]string{
		"version":              "2020_10_22",
		"host":                 host,
		"action":               "kafka-cluster:Connect",
		"x-amz-algorithm":      "AWS4-HMAC-SHA256",
		"x-amz-security-token": "example-session-token",
		"x-amz-signedheaders":  "host",
		"x-amz-expires":        "900",
	} {
		if p[k] != want {
			t.Errorf("payload %s = %q, want %q", k, p[k], want)
		}
	}
	if c := p["x-amz-credential"]; !regexp.MustCompile(`^AKIAEXAMPLEKEY/\d{8}/eu-west-1/kafka-cluster/aws4_request$`).MatchString(c) {
		t.Errorf("payload x-amz-credential = %q, want the environment's key, a date, the region and kafka-cluster", c)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(p["x-amz-signature"]) {
		t.Errorf("payload x-amz-signature = %q, want a SigV4 signature (64 hex digits)", p["x-amz-signature"])
	}
	if strings.Contains(string(msg), "example-secret") {
		t.Errorf("the payload carries the secret key: %s", msg)
	}
}
