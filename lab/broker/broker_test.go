package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/lab/testenv"
)

// TestPersistsAcrossRestart proves what `tidemark-lab kafka --data-dir` promises
// in both durability modes: records survive a restart on the same fixed port.
func TestPersistsAcrossRestart(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync-writes=%v", sync), func(t *testing.T) {
			cfg := Config{DataDir: t.TempDir(), SyncWrites: sync, Port: testenv.FreePort(t), Brokers: 1, Partitions: 3}
			ctx := testenv.Context(t, time.Minute)

			b, err := New(cfg, Deps{Log: testenv.Logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			produce(ctx, t, b.Addrs(), "persist", 1)
			addr := b.Addrs()[0]
			b.Close()

			b2, err := New(cfg, Deps{Log: testenv.Logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer b2.Close()
			if got := b2.Addrs()[0]; got != addr {
				t.Fatalf("restarted on %s, want the fixed %s", got, addr)
			}
			consumeAll(ctx, t, b2.Addrs(), "persist", 1)
		})
	}
}

// TestKill9KeepsAckedRecords runs `tidemark-lab kafka` as a process, kills it
// with SIGKILL after records were acknowledged and restarts it: both modes
// keep every acknowledged record (the page cache outlives the process).
func TestKill9KeepsAckedRecords(t *testing.T) {
	bin := testenv.LabBinary(t)
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync-writes=%v", sync), func(t *testing.T) {
			dir, port := t.TempDir(), testenv.FreePort(t)
			ctx := testenv.Context(t, 2*time.Minute)
			start := func() *exec.Cmd {
				args := []string{"kafka", "--data-dir", dir, "--port", strconv.Itoa(port), "--partitions", "3"}
				if sync {
					args = append(args, "--sync-writes")
				}
				cmd := exec.Command(bin, args...)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
				testenv.Eventually(t, 30*time.Second, "tidemark-lab kafka listens", func() error {
					c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
					if err == nil {
						c.Close()
					}
					return err
				})
				return cmd
			}
			addrs := []string{"127.0.0.1:" + strconv.Itoa(port)}
			cmd := start()
			const n = 500
			produce(ctx, t, addrs, "killed", n)
			cmd.Process.Kill() // SIGKILL: no shutdown sync
			cmd.Wait()
			start()
			consumeAll(ctx, t, addrs, "killed", n)
		})
	}
}

// TestSealedSegmentsAreSynced: without SyncWrites, a rolled segment is
// fsynced by the broker (kfake alone never syncs it).
func TestSealedSegmentsAreSynced(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Brokers: 1, Partitions: 1, SegmentBytes: 4096, SealedSyncInterval: 50 * time.Millisecond}
	b, err := New(cfg, Deps{Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := testenv.Context(t, time.Minute)
	produce(ctx, t, b.Addrs(), "roll", 200)
	testenv.Eventually(t, 10*time.Second, "sealed segments fsynced", func() error {
		b.syncer.mu.Lock()
		defer b.syncer.mu.Unlock()
		var segs int
		for f := range b.syncer.synced {
			if strings.HasSuffix(f, ".dat") {
				segs++
			}
		}
		if segs == 0 {
			return fmt.Errorf("no sealed segment synced yet (%d files synced)", len(b.syncer.synced))
		}
		return nil
	})
}

func produce(ctx context.Context, t *testing.T, addrs []string, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Created explicitly, as capture and apply create theirs: kfake persists
	// an auto-created topic's metadata only at a clean shutdown.
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatal(err)
	}
	for i := range n {
		// One at a time: every record is its own acknowledged batch.
		if err := cl.ProduceSync(ctx, kgo.KeyStringRecord(strconv.Itoa(i), "v"+strconv.Itoa(i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// consumeAll reads the topic from the start until it has seen v0..v(n-1).
func consumeAll(ctx context.Context, t *testing.T, addrs []string, topic string, n int) {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	for len(seen) < n {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("after the restart only %d of %d acknowledged records are there", len(seen), n)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
}

func TestValidateNamesEveryProblem(t *testing.T) {
	err := Config{Port: -1, Brokers: 0, Partitions: 0, SyncWrites: true, SASLDir: "certs", Describe: "cluster.json"}.Validate()
	for _, want := range []string{"Port:", "Brokers:", "Partitions:", "SyncWrites:", "SASLDir:", "Describe:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, does not name %s", err, want)
		}
	}
}
