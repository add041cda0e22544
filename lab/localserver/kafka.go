package localserver

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaConfig says where and how a private Apache Kafka cluster runs.
type KafkaConfig struct {
	// Dir holds one directory per node (node-<id>: data, config, log).
	// Existing node directories are reused: a cluster restarts on its data.
	Dir   string
	Nodes int    // KRaft nodes, each a combined broker and controller; 0 = 3
	Heap  string // JVM maximum heap per node; "" = 256m
	// Port, if set, fixes the ports: node i (1-based) serves clients on
	// Port+i-1 and its controller on Port+Nodes+i-1. 0 = free ports.
	Port int
	// Conf overrides or adds broker settings (server.properties) on every node.
	Conf map[string]string
	// SASL, when set, adds a SASL_SSL listener on every node (SASLAddr):
	// TLS with these certificates (clients must present one signed by the
	// CA), SCRAM-SHA-512 users made with AddSCRAMUser, and OAUTHBEARER with
	// Kafka's unsecured (unsigned) JWT validator, its principal the token's
	// sub. ACLs are enforced (StandardAuthorizer, nothing allowed without an
	// ACL); the only super user is the PLAINTEXT listener's ANONYMOUS
	// principal: the brokers, the controllers and the harness itself.
	SASL *Certs
}

// Kafka is a private Apache Kafka KRaft cluster: every node is both broker
// and controller, in its own JVM, listening on loopback ports. Nodes can be
// stopped, killed and restarted one at a time on their data.
type Kafka struct {
	Nodes []*KafkaNode
}

// KafkaNode is one broker+controller JVM.
type KafkaNode struct {
	ID             int32
	Addr           string // broker listener, 127.0.0.1:<port>
	ControllerAddr string // KRaft controller listener
	SASLAddr       string // SASL_SSL broker listener (KafkaConfig.SASL)

	dir      string
	javaPath string
	cp       string
	heap     string
	attached bool // another process runs it (AttachKafka)

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// NewKafka fetches the broker (once, see KafkaJars), formats each node's
// storage if new, starts every node and waits until all brokers are
// registered and unfenced.
func NewKafka(ctx context.Context, cfg KafkaConfig) (*Kafka, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Nodes < 1 || cfg.Nodes > 9 {
		return nil, fmt.Errorf("localserver: kafka nodes %d must be between 1 and 9", cfg.Nodes)
	}
	if cfg.Heap == "" {
		cfg.Heap = "256m"
	}
	java, err := JavaPath()
	if err != nil {
		return nil, err
	}
	libs, err := KafkaJars(ctx)
	if err != nil {
		return nil, err
	}
	root, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	k := &Kafka{}
	for i := range cfg.Nodes {
		n := &KafkaNode{ID: int32(i + 1), dir: filepath.Join(root, fmt.Sprintf("node-%d", i+1)),
			javaPath: java, cp: filepath.Join(libs, "*"), heap: cfg.Heap}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return nil, fmt.Errorf("localserver: kafka dir: %w", err)
		}
		k.Nodes = append(k.Nodes, n)
	}
	// A new cluster whose node lost a port to another process between the
	// probe and the JVM's bind is started again from scratch on new ports;
	// a cluster restarting on its data keeps its recorded ports.
	for attempt := 1; ; attempt++ {
		fresh, err := k.assignPorts(cfg.Port, cfg.SASL != nil)
		if err != nil {
			return nil, err
		}
		err = k.start(ctx, cfg)
		if err == nil {
			return k, nil
		}
		if !fresh || attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			return nil, err
		}
		for _, n := range k.Nodes {
			if err := os.RemoveAll(n.dir); err != nil {
				return nil, fmt.Errorf("localserver: kafka dir: %w", err)
			}
			if err := os.MkdirAll(n.dir, 0o755); err != nil {
				return nil, fmt.Errorf("localserver: kafka dir: %w", err)
			}
		}
	}
}

// start writes every node's configuration, formats and starts the nodes,
// and waits for the brokers; on failure every node is killed.
func (k *Kafka) start(ctx context.Context, cfg KafkaConfig) error {
	clusterID, err := k.clusterID()
	if err != nil {
		return err
	}
	for _, n := range k.Nodes {
		if cfg.SASL != nil {
			if err := writeKeystore(filepath.Join(n.dir, "keystore.pem"), *cfg.SASL); err != nil {
				return err
			}
		}
		if err := n.writeConfig(k.props(n, cfg)); err != nil {
			return err
		}
	}
	// Format and start the nodes side by side: a controller quorum forms only
	// when a majority is up, and each JVM takes seconds to boot.
	errs := make([]error, len(k.Nodes))
	var wg sync.WaitGroup
	for i, n := range k.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = n.format(ctx, clusterID); errs[i] == nil {
				errs[i] = n.Start()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		k.Kill()
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := k.WaitBrokers(wctx); err != nil {
		k.Kill()
		return err
	}
	return nil
}

// assignPorts reuses the ports recorded in existing node directories (the
// quorum and advertised addresses must not change on restart), else picks
// free ones. fresh says every port was newly picked.
func (k *Kafka) assignPorts(fixed int, sasl bool) (fresh bool, err error) {
	fresh = fixed == 0
	addr := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	for i, n := range k.Nodes {
		if fixed != 0 {
			n.Addr, n.ControllerAddr = addr(fixed+i), addr(fixed+len(k.Nodes)+i)
			if sasl {
				n.SASLAddr = addr(fixed + 2*len(k.Nodes) + i)
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(n.dir, "ports"))
		if err == nil {
			var bp, cp, sp int
			if c, _ := fmt.Sscanf(string(b), "%d %d %d", &bp, &cp, &sp); c >= 2 && (!sasl || c == 3) {
				n.Addr, n.ControllerAddr = addr(bp), addr(cp)
				if sasl {
					n.SASLAddr = addr(sp)
				}
				fresh = false
				continue
			}
		}
		var ports [3]int
		for j := range ports {
			if ports[j], err = FreePort(); err != nil {
				return false, err
			}
		}
		n.Addr, n.ControllerAddr = addr(ports[0]), addr(ports[1])
		if sasl {
			n.SASLAddr = addr(ports[2])
		}
		if err := os.WriteFile(filepath.Join(n.dir, "ports"), fmt.Appendf(nil, "%d %d %d\n", ports[0], ports[1], ports[2]), 0o644); err != nil {
			return false, err
		}
	}
	return fresh, nil
}

// clusterID is the one recorded by an earlier run, or a new random one
// (22 characters of URL-safe base64, as kafka-storage random-uuid makes).
// Like Kafka's Uuid.randomUuid it never starts with '-': the storage tool
// would read such an id as an option ("--cluster-id: expected one
// argument"): one cluster start in 64 failed that way.
func (k *Kafka) clusterID() (string, error) {
	p := filepath.Join(filepath.Dir(k.Nodes[0].dir), "cluster-id")
	if b, err := os.ReadFile(p); err == nil {
		if id := strings.TrimSpace(string(b)); len(id) == 22 && id[0] != '-' {
			return id, nil
		}
	}
	id := "-"
	for id[0] == '-' {
		var u [16]byte
		rand.Read(u[:])
		u[6] = u[6]&0x0f | 0x40 // version 4, as Kafka's Uuid.randomUuid
		u[8] = u[8]&0x3f | 0x80
		id = base64.RawURLEncoding.EncodeToString(u[:])
	}
	return id, os.WriteFile(p, []byte(id+"\n"), 0o644)
}

// props is each node's server.properties: small thread pools and buffers
// for a test machine, and short failure detection so fault tests run in
// seconds (a killed broker is fenced after 3 s).
func (k *Kafka) props(n *KafkaNode, cfg KafkaConfig) map[string]string {
	nodes := len(k.Nodes)
	rf := strconv.Itoa(min(3, nodes))
	isr := strconv.Itoa(min(2, nodes))
	var voters []string
	for _, m := range k.Nodes {
		voters = append(voters, fmt.Sprintf("%d@%s", m.ID, m.ControllerAddr))
	}
	p := map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          strconv.Itoa(int(n.ID)),
		"controller.quorum.voters":                         strings.Join(voters, ","),
		"listeners":                                        "PLAINTEXT://" + n.Addr + ",CONTROLLER://" + n.ControllerAddr,
		"advertised.listeners":                             "PLAINTEXT://" + n.Addr,
		"controller.listener.names":                        "CONTROLLER",
		"inter.broker.listener.name":                       "PLAINTEXT",
		"listener.security.protocol.map":                   "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
		"log.dirs":                                         filepath.Join(n.dir, "data"),
		"num.network.threads":                              "2",
		"num.io.threads":                                   "2",
		"background.threads":                               "2",
		"num.replica.fetchers":                             "1",
		"num.recovery.threads.per.data.dir":                "1",
		"log.cleaner.threads":                              "1",
		"log.cleaner.dedupe.buffer.size":                   "8388608",
		"log.cleaner.backoff.ms":                           "1000",
		"log.retention.check.interval.ms":                  "1000",
		"log.initial.task.delay.ms":                        "1000",
		"offsets.topic.replication.factor":                 rf,
		"offsets.topic.num.partitions":                     "6",
		"transaction.state.log.replication.factor":         rf,
		"transaction.state.log.min.isr":                    isr,
		"transaction.state.log.num.partitions":             "6",
		"share.coordinator.state.topic.replication.factor": rf,
		"share.coordinator.state.topic.min.isr":            isr,
		"default.replication.factor":                       rf,
		"min.insync.replicas":                              isr,
		"num.partitions":                                   "12",
		"auto.create.topics.enable":                        "true",
		"group.initial.rebalance.delay.ms":                 "0",
		"group.min.session.timeout.ms":                     "1000",
		"broker.heartbeat.interval.ms":                     "500",
		"broker.session.timeout.ms":                        "3000",
		"replica.lag.time.max.ms":                          "5000",
		"unclean.leader.election.enable":                   "false",
	}
	if c := cfg.SASL; c != nil {
		const l = "listener.name.sasl_ssl."
		p["listeners"] += ",SASL_SSL://" + n.SASLAddr
		p["advertised.listeners"] += ",SASL_SSL://" + n.SASLAddr
		p["listener.security.protocol.map"] += ",SASL_SSL:SASL_SSL"
		maps.Copy(p, map[string]string{
			l + "sasl.enabled.mechanisms":        "SCRAM-SHA-512,OAUTHBEARER",
			l + "scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
			l + "oauthbearer.sasl.jaas.config":   "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
			l + "ssl.keystore.type":              "PEM",
			l + "ssl.keystore.location":          filepath.Join(n.dir, "keystore.pem"),
			l + "ssl.truststore.type":            "PEM",
			l + "ssl.truststore.location":        c.CA,
			l + "ssl.client.auth":                "required",
			"authorizer.class.name":              "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
			"allow.everyone.if.no.acl.found":     "false",
			"super.users":                        "User:ANONYMOUS",
			// A SASL session lasts at most an hour, an OAUTHBEARER one
			// until its token expires: the client authenticates again.
			"connections.max.reauth.ms": "3600000",
		})
	}
	maps.Copy(p, cfg.Conf)
	return p
}

// writeKeystore puts the server key and certificate in one PEM file, as
// Kafka's PEM keystore takes them.
func writeKeystore(path string, c Certs) error {
	key, err := os.ReadFile(c.ServerKey)
	if err != nil {
		return fmt.Errorf("localserver: kafka keystore: %w", err)
	}
	cert, err := os.ReadFile(c.ServerCert)
	if err != nil {
		return fmt.Errorf("localserver: kafka keystore: %w", err)
	}
	return os.WriteFile(path, append(key, cert...), 0o600)
}

func (n *KafkaNode) writeConfig(props map[string]string) error {
	keys := slices.Sorted(maps.Keys(props))
	var b strings.Builder
	b.WriteString("# written by tidemark on every start\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, props[k])
	}
	if err := os.WriteFile(filepath.Join(n.dir, "server.properties"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	log4j := fmt.Sprintf(`status = warn
appender.f.type = File
appender.f.name = F
appender.f.fileName = %s
appender.f.layout.type = PatternLayout
appender.f.layout.pattern = [%%d] %%p %%m (%%c)%%n
rootLogger.level = INFO
rootLogger.appenderRef.f.ref = F
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
`, n.logPath())
	return os.WriteFile(filepath.Join(n.dir, "log4j2.properties"), []byte(log4j), 0o644)
}

func (n *KafkaNode) logPath() string { return filepath.Join(n.dir, "server.log") }

func (n *KafkaNode) java(args ...string) *exec.Cmd {
	jvm := []string{"-Xmx" + n.heap, "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-XX:-UsePerfData", "-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + filepath.Join(n.dir, "log4j2.properties"),
		"-cp", n.cp}
	cmd := exec.Command(n.javaPath, append(jvm, args...)...)
	// Own process group; killed if we die, so no JVM outlives its test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = n.dir
	return cmd
}

// format writes the KRaft storage metadata once; a formatted node is left
// as it is.
func (n *KafkaNode) format(ctx context.Context, clusterID string) error {
	if _, err := os.Stat(filepath.Join(n.dir, "data", "meta.properties")); err == nil {
		return nil
	}
	cmd := n.java("kafka.tools.StorageTool", "format", "-t", clusterID, "-c", filepath.Join(n.dir, "server.properties"), "--ignore-formatted")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("localserver: kafka node %d: format storage: %v\n%s", n.ID, err, tailString(string(out), 3000))
	}
	return ctx.Err()
}

// Start starts (or restarts, on its data) the node's JVM and waits until
// its broker port accepts connections. A cluster is usable once
// WaitBrokers says every broker is registered.
func (n *KafkaNode) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.attached {
		return errAttached
	}
	if n.cmd != nil {
		return nil
	}
	logFile, err := os.OpenFile(filepath.Join(n.dir, "stdout.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := n.java("kafka.Kafka", filepath.Join(n.dir, "server.properties"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("localserver: start kafka node %d: %w", n.ID, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logFile.Close(); close(done) }()
	n.cmd, n.done = cmd, done
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if c, err := dialTCP(n.Addr); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			n.cmd = nil
			return fmt.Errorf("localserver: kafka node %d exited during start-up%s:\n%s", n.ID, javaHint(n.LogTail()), n.LogTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("localserver: kafka node %d did not listen on %s within 3m:\n%s", n.ID, n.Addr, n.LogTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func javaHint(log string) string {
	if strings.Contains(log, "UnsupportedClassVersionError") {
		return " (Apache Kafka " + KafkaVersion + " needs Java 17 or newer: set JAVA_HOME)"
	}
	return ""
}

// Running says whether the node's JVM is up (as far as we started it).
func (n *KafkaNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// exited says the node's JVM, started by us and not stopped by us, is gone.
func (n *KafkaNode) exited() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// Stop shuts the node down cleanly (controlled shutdown: its partitions'
// leadership moves first) and waits for the JVM to exit.
func (n *KafkaNode) Stop() { n.signal(syscall.SIGTERM) }

// Kill kills the node's JVM with SIGKILL, as a crash or power loss would.
func (n *KafkaNode) Kill() { n.signal(syscall.SIGKILL) }

func (n *KafkaNode) signal(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	signalWait(n.cmd, n.done, sig, true, 60*time.Second)
	n.cmd = nil
}

// LogTail returns the end of the node's logs, for error messages.
func (n *KafkaNode) LogTail() string {
	var s string
	for _, f := range []string{"stdout.log", "server.log"} {
		b, _ := os.ReadFile(filepath.Join(n.dir, f))
		if len(b) > 0 {
			s += f + ":\n" + tailString(string(b), 3000) + "\n"
		}
	}
	return s
}

// Brokers is every node's broker address (stopped ones included: clients
// take the list as seeds).
func (k *Kafka) Brokers() []string {
	var a []string
	for _, n := range k.Nodes {
		a = append(a, n.Addr)
	}
	return a
}

// Node returns the node with the given id (1-based), or nil.
func (k *Kafka) Node(id int32) *KafkaNode {
	for _, n := range k.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Stop stops every node cleanly, one by one.
func (k *Kafka) Stop() {
	for i := len(k.Nodes) - 1; i >= 0; i-- {
		k.Nodes[i].Stop()
	}
}

// Kill kills every node at once.
func (k *Kafka) Kill() {
	for _, n := range k.Nodes {
		n.Kill()
	}
}

// Client is a franz-go client seeded with every node, for admin requests.
func (k *Kafka) Client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.Brokers()...)}, opts...)...)
}

// WaitBrokers waits until every running node is a registered, unfenced
// broker in the cluster's metadata (and no stopped node is).
func (k *Kafka) WaitBrokers(ctx context.Context) error {
	var want []int32
	for _, n := range k.Nodes {
		if n.Running() {
			want = append(want, n.ID)
		}
	}
	var seeds []string
	for _, n := range k.Nodes {
		if n.Running() {
			seeds = append(seeds, n.Addr)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last string
	for {
		bd, err := adm.ListBrokers(ctx)
		if err == nil {
			got := bd.NodeIDs()
			sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
			if slices.Equal(got, want) {
				return nil
			}
			last = fmt.Sprintf("brokers %v registered, want %v", got, want)
		} else {
			last = err.Error()
		}
		for _, n := range k.Nodes {
			if n.exited() {
				return fmt.Errorf("localserver: kafka node %d exited while the cluster formed:\n%s", n.ID, n.LogTail())
			}
		}
		select {
		case <-ctx.Done():
			var tails string
			for _, n := range k.Nodes {
				tails += fmt.Sprintf("--- node %d\n%s", n.ID, n.LogTail())
			}
			return fmt.Errorf("localserver: kafka cluster not ready: %s: %w\n%s", last, ctx.Err(), tails)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ActiveController asks the KRaft quorum which node leads it.
func (k *Kafka) ActiveController(ctx context.Context) (int32, error) {
	cl, err := k.Client()
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rp := kmsg.NewDescribeQuorumRequestTopicPartition()
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("localserver: describe quorum: %w", err)
	}
	// The metadata topic has one partition: the first one answers.
	for _, t := range resp.Topics {
		if len(t.Partitions) == 0 {
			continue
		}
		p := t.Partitions[0]
		if p.ErrorCode != 0 {
			return 0, fmt.Errorf("localserver: describe quorum: error code %d", p.ErrorCode)
		}
		return p.LeaderID, nil
	}
	if resp.ErrorCode != 0 {
		return 0, fmt.Errorf("localserver: describe quorum: error code %d", resp.ErrorCode)
	}
	return 0, errors.New("localserver: describe quorum: empty answer")
}

// Remove kills every node and deletes the cluster's directory.
func (k *Kafka) Remove() {
	k.Kill()
	if len(k.Nodes) > 0 && !k.Nodes[0].attached {
		os.RemoveAll(filepath.Dir(k.Nodes[0].dir))
	}
}

// SASLBrokers is every node's SASL_SSL address (KafkaConfig.SASL).
func (k *Kafka) SASLBrokers() []string {
	var a []string
	for _, n := range k.Nodes {
		if n.SASLAddr != "" {
			a = append(a, n.SASLAddr)
		}
	}
	return a
}

// AddSCRAMUser makes (or resets) a SCRAM-SHA-512 user of the SASL_SSL
// listener. It has no rights until ACLs grant them.
func (k *Kafka) AddSCRAMUser(ctx context.Context, user, password string) error {
	cl, err := k.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{
		User: user, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: password}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		return fmt.Errorf("localserver: add SCRAM user %s: %w", user, err)
	}
	return nil
}
