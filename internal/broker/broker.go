// Package broker runs an embedded Kafka broker (kfake) for local multi-process
// runs, `tidemark dev` and manual testing. It is not a production Kafka: it
// has no replication, and its durability is one process's disk. With Real it
// runs Apache Kafka itself instead (see localserver.NewKafka): one JVM per
// broker, replicated, for checking behaviour and latency against the real
// broker on one machine.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"tidemark/internal/localserver"
)

// Config of the embedded broker.
type Config struct {
	DataDir    string // persist here ("" = memory only)
	Port       int    // first broker's port; broker i listens on Port+i (0 = random)
	Brokers    int
	Partitions int // partitions of auto-created topics
	// Real runs Apache Kafka (KRaft, each broker also a controller) instead
	// of kfake; it needs Java 17+ and fetches the broker with Maven once.
	Real bool
}

// DefaultConfig is what `tidemark kafka` runs with no flags.
func DefaultConfig() Config {
	return Config{DataDir: ".tidemark/kafka", Port: 9092, Brokers: 1, Partitions: 12}
}

// Validate reports every problem at once, naming the flag.
func (c Config) Validate() error {
	var errs []error
	if c.Port < 0 || c.Port > 65535-c.Brokers {
		errs = append(errs, fmt.Errorf("--port %d is not a usable TCP port", c.Port))
	}
	if c.Brokers < 1 || c.Brokers > 16 {
		errs = append(errs, fmt.Errorf("--brokers %d must be between 1 and 16", c.Brokers))
	}
	if c.Real && (c.Brokers > 9 || c.Port > 65535-2*c.Brokers) {
		errs = append(errs, fmt.Errorf("--real runs at most 9 brokers and needs 2 ports each from --port (got --brokers %d, --port %d)", c.Brokers, c.Port))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("--partitions %d must be at least 1", c.Partitions))
	}
	return errors.Join(errs...)
}

// Broker is a running kfake cluster, or an Apache Kafka cluster (Real).
type Broker struct {
	cluster *kfake.Cluster
	real    *localserver.Kafka
	tmpDir  string // a Real cluster's data when no DataDir was given
	log     *slog.Logger
}

// New starts the cluster and listens at once.
func New(cfg Config, log *slog.Logger) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
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
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir), kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: start embedded kafka: %w", err)
	}
	return &Broker{cluster: c, log: log.With("component", "broker")}, nil
}

func newReal(cfg Config, log *slog.Logger) (*Broker, error) {
	b := &Broker{log: log.With("component", "broker")}
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
	k, err := localserver.NewKafka(context.Background(), localserver.KafkaConfig{
		Dir: dir, Nodes: cfg.Brokers, Port: cfg.Port,
		Conf: map[string]string{"num.partitions": strconv.Itoa(cfg.Partitions)},
	})
	if err != nil {
		if b.tmpDir != "" {
			os.RemoveAll(b.tmpDir)
		}
		return nil, fmt.Errorf("broker: start Apache Kafka: %w", err)
	}
	b.real = k
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
		b.log.Info("embedded kafka broker running (not for production)", "brokers", strings.Join(b.Addrs(), ","))
	}
	<-ctx.Done()
	b.Close()
	b.log.Info("kafka stopped")
	return nil
}

// Close stops the cluster without waiting for Run.
func (b *Broker) Close() {
	if b.real == nil {
		b.cluster.Close()
		return
	}
	b.real.Stop()
	if b.tmpDir != "" {
		os.RemoveAll(b.tmpDir)
	}
}
