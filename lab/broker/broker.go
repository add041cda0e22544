// Package broker runs an embedded Kafka broker (kfake) for local multi-process
// runs, `tidemark-lab dev` and manual testing. It is not a production Kafka: it
// has no replication, and its durability is one process's disk. With Real it
// runs Apache Kafka itself instead (see localserver.NewKafka): one JVM per
// broker, replicated, for checking behaviour and latency against the real
// broker on one machine.
//
// kfake's durability follows Kafka's default unless SyncWrites is set:
// records are written to the segment files as they are acknowledged and left
// to the page cache (Kafka's log.flush.interval.messages is unbounded too), a
// segment is fsynced once it is sealed (rolled) and every file at shutdown.
// Acknowledged records therefore survive the broker process being killed
// (kill -9), but not a machine crash or power loss. SyncWrites fsyncs every
// produced batch before acknowledging it, so records survive a machine crash
// too, at the cost of a disk flush on every produce.
//
// kfake records a topic created implicitly (by a metadata or produce request)
// only at a clean shutdown; capture and apply create their topics explicitly,
// which kfake persists at once.
package broker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tidemark/tidemark/lab/localserver"

	"github.com/tidemark/tidemark/internal/config"
)

// Config of the embedded broker.
type Config struct {
	DataDir    string // persist here ("" = memory only)
	Port       int    // first broker's port; broker i listens on Port+i (0 = random)
	Brokers    int
	Partitions int  // partitions of auto-created topics
	SyncWrites bool // kfake fsyncs every produced batch (survives a machine crash); needs DataDir
	// SealedSyncInterval is how often kfake's sealed segments are looked for
	// and fsynced when SyncWrites is off (0 = every second).
	SealedSyncInterval time.Duration
	// SegmentBytes caps a kfake segment file before it rolls (0 = kfake's 100 MiB).
	SegmentBytes int
	// Real runs Apache Kafka (KRaft, each broker also a controller) instead
	// of kfake; it needs Java 17+ and fetches the broker with Maven once.
	Real bool
	// SASLDir, with Real, adds a SASL_SSL listener with ACLs enforced to
	// every node (localserver.KafkaConfig.SASL), its CA and certificates
	// made in this directory.
	SASLDir string
	// Describe, with Real, is a file the cluster's description
	// (localserver.KafkaInfo as JSON) is written to once every broker
	// serves: how test binaries share one cluster (lab/testenv).
	Describe string
}

// DefaultConfig is what `tidemark-lab kafka` runs with no flags.
func DefaultConfig() Config {
	return Config{DataDir: ".tidemark/kafka", Port: 9092, Brokers: 1, Partitions: 12}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Port < 0 || c.Port > 65535-c.Brokers {
		p.Add("Port", "%d is not a usable TCP port", c.Port)
	}
	if c.Brokers < 1 || c.Brokers > 16 {
		p.Add("Brokers", "must be between 1 and 16 (got %d)", c.Brokers)
	}
	if c.Real && (c.Brokers > 9 || c.Port > 65535-2*c.Brokers) {
		p.Add("Real", "runs at most 9 brokers and needs 2 ports each from the base port (got %d brokers, port %d)", c.Brokers, c.Port)
	}
	if c.Partitions < 1 {
		p.Add("Partitions", "must be at least 1 (got %d)", c.Partitions)
	}
	if !c.Real && c.SASLDir != "" {
		p.Add("SASLDir", "needs Apache Kafka (Real): the embedded broker has no SASL listener")
	}
	if !c.Real && c.Describe != "" {
		p.Add("Describe", "needs Apache Kafka (Real)")
	}
	if c.SyncWrites && (c.DataDir == "" || c.Real) {
		p.Add("SyncWrites", "needs a data directory and the embedded broker (Apache Kafka has its own flush settings)")
	}
	if c.SealedSyncInterval < 0 {
		p.Add("SealedSyncInterval", "must not be negative (got %s)", c.SealedSyncInterval)
	}
	if c.SegmentBytes < 0 {
		p.Add("SegmentBytes", "must not be negative (got %d)", c.SegmentBytes)
	}
	return p.Err()
}

// Broker is a running kfake cluster, or an Apache Kafka cluster (Real).
type Broker struct {
	cluster *kfake.Cluster
	real    *localserver.Kafka
	tmpDir  string // a Real cluster's data when no DataDir was given
	log     *slog.Logger
	cfg     Config
	syncer  *syncer // nil unless kfake persists without SyncWrites

	closeOnce sync.Once
	closeErr  error
}

// Deps are the broker's dependencies; a nil Log discards.
type Deps struct {
	Log *slog.Logger
}

// New starts the cluster and listens at once.
func New(cfg Config, d Deps) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Real {
		return newReal(cfg, log)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(cfg.Brokers),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(cfg.Partitions),
		// Consumer groups may ask for short sessions: the applier uses 6 s.
		kfake.GroupMinSessionTimeout(time.Second),
	}
	if cfg.Port != 0 {
		ports := make([]int, cfg.Brokers)
		for i := range ports {
			ports[i] = cfg.Port + i
		}
		opts = append(opts, kfake.Ports(ports...))
	}
	if cfg.SegmentBytes > 0 {
		opts = append(opts, kfake.BrokerConfigs(map[string]string{"log.segment.bytes": strconv.Itoa(cfg.SegmentBytes)}))
	}
	log = log.With("component", "broker")
	b := &Broker{log: log, cfg: cfg}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
		if cfg.SyncWrites {
			opts = append(opts, kfake.SyncWrites())
		} else {
			// kfake without SyncWrites never fsyncs segment data (not even on
			// roll or close): the syncer supplies Kafka's default.
			b.syncer = newSyncer(cfg.DataDir, orDefault(cfg.SealedSyncInterval, time.Second), log)
		}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: start embedded kafka: %w", err)
	}
	b.cluster = c
	if b.syncer != nil {
		go b.syncer.run()
	}
	return b, nil
}

func orDefault(d, dflt time.Duration) time.Duration {
	if d == 0 {
		return dflt
	}
	return d
}

func newReal(cfg Config, log *slog.Logger) (*Broker, error) {
	b := &Broker{log: log.With("component", "broker"), cfg: cfg}
	// Apache Kafka's files live apart from kfake's in the same data dir.
	dir := filepath.Join(cfg.DataDir, "apache-kafka-"+localserver.KafkaVersion)
	if cfg.DataDir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "tidemark-kafka-"); err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		}
		b.tmpDir = dir
	}
	b.log.Info("starting Apache Kafka (first run fetches it with Maven)", "version", localserver.KafkaVersion, "brokers", cfg.Brokers, "dir", dir)
	kcfg := localserver.KafkaConfig{
		Dir: dir, Nodes: cfg.Brokers, Port: cfg.Port,
		Conf: map[string]string{"num.partitions": strconv.Itoa(cfg.Partitions)},
	}
	fail := func(err error) (*Broker, error) {
		if b.tmpDir != "" {
			os.RemoveAll(b.tmpDir)
		}
		return nil, fmt.Errorf("broker: start Apache Kafka: %w", err)
	}
	if cfg.SASLDir != "" {
		certs, err := localserver.MakeCerts(cfg.SASLDir)
		if err != nil {
			return fail(err)
		}
		kcfg.SASL = &certs
	}
	k, err := localserver.NewKafka(context.Background(), kcfg)
	if err != nil {
		return fail(err)
	}
	b.real = k
	if cfg.Describe != "" {
		if err := localserver.WriteKafkaInfo(cfg.Describe, k.Info(kcfg.SASL)); err != nil {
			k.Remove()
			return fail(err)
		}
	}
	return b, nil
}

// Addrs are the brokers' listen addresses (not callable after Close: kfake blocks).
func (b *Broker) Addrs() []string {
	if b.real != nil {
		return b.real.Brokers()
	}
	return b.cluster.ListenAddrs()
}

// Run serves until ctx ends, then closes the cluster (flushing its data).
func (b *Broker) Run(ctx context.Context) error {
	if b.real != nil {
		b.log.Info("Apache Kafka running", "version", localserver.KafkaVersion, "brokers", strings.Join(b.Addrs(), ","))
	} else {
		b.log.Info("embedded kafka broker running (not for production)", "brokers", strings.Join(b.Addrs(), ","),
			"data_dir", b.cfg.DataDir, "sync_writes", b.cfg.SyncWrites)
	}
	<-ctx.Done()
	err := b.close()
	b.log.Info("kafka stopped")
	return err
}

// Close stops the cluster without waiting for Run (kfake: fsyncing its files).
func (b *Broker) Close() {
	if err := b.close(); err != nil {
		b.log.Error("embedded kafka: sync at shutdown", "err", err)
	}
}

func (b *Broker) close() error {
	b.closeOnce.Do(func() {
		if b.real != nil {
			// First, so that no test binary attaches to a cluster going away.
			if b.cfg.Describe != "" {
				if err := os.Remove(b.cfg.Describe); err != nil && !errors.Is(err, fs.ErrNotExist) {
					b.log.Warn("the cluster's description stays behind", "path", b.cfg.Describe, "err", err)
				}
			}
			if b.tmpDir == "" {
				b.real.Stop()
				return
			}
			// Its data is deleted next: a clean shutdown (each node
			// handing its partitions over, the last one waiting for a
			// quorum that has gone) would only delay that.
			b.real.Kill()
			os.RemoveAll(b.tmpDir)
			return
		}
		b.cluster.Close()
		if b.syncer != nil {
			b.closeErr = b.syncer.stopAndSyncAll()
		}
	})
	return b.closeErr
}
