package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// The real tidemark serve, configured for tracing by the OpenTelemetry
// variables alone (no --trace-endpoint, no TIDEMARK_TRACE_*), as an
// OpenTelemetry operator or collector sidecar sets them: a GET's span
// arrives at OTEL_EXPORTER_OTLP_ENDPOINT under OTEL_SERVICE_NAME with
// OTEL_RESOURCE_ATTRIBUTES on its resource.
func TestServeTracesWithOTELVariablesOnly(t *testing.T) {
	bin := testenv.Binary(t)
	dsn := testenv.SharedPostgres(t).MigratedDatabase(t)
	r := testenv.StartRedis(t)
	code, out, errs := runCLI(t, "apikey", "create", "--pg", dsn, "--tenant", "acme")
	if code != 0 {
		t.Fatalf("apikey create: exit %d\n%s\n%s", code, out, errs)
	}
	key := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])

	o := testenv.StartOTLP(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cmd := exec.Command(bin, "serve", "--pg", dsn, "--redis", r.URL(), "--addr", addr, "--metrics-addr", "",
		"--audit-rate", "0", "--warm-top", "0")
	for _, kv := range os.Environ() { // nothing of tidemark's or OpenTelemetry's from the test's environment
		if !strings.HasPrefix(kv, "TIDEMARK_") && !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+o.URL(),
		"OTEL_SERVICE_NAME=catalog-cache-serve",
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=staging,k8s.namespace.name=shop",
		"OTEL_TRACES_SAMPLER=always_on",
		"OTEL_BSP_SCHEDULE_DELAY=200",
	)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})

	client := &http.Client{Timeout: 5 * time.Second}
	testenv.Eventually(t, 90*time.Second, "a GET's span arrives with OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES", func() error {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, logs.String())
		default:
		}
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/catalog/items/i1", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		spans := o.Spans()
		for _, s := range spans {
			if s.Service == "catalog-cache-serve" && s.Resource["deployment.environment.name"] == "staging" && s.Resource["k8s.namespace.name"] == "shop" {
				t.Logf("span %q of trace %s arrived at %s with resource %v", s.Name, s.TraceID, o.URL(), s.Resource)
				return nil
			}
		}
		if len(spans) > 0 {
			return fmt.Errorf("%d spans arrived, none with the OTEL_* service and resource (first: service %q, resource %v)", len(spans), spans[0].Service, spans[0].Resource)
		}
		return fmt.Errorf("no span arrived (GET answered %d)", resp.StatusCode)
	})
}
