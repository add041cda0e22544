package localserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// KafkaVersion is the Apache Kafka release that the real-Kafka tests,
// `tidemark-lab kafka --real` and compose/ run.
const KafkaVersion = "4.4.0"

// kafkaPom names the broker and a log4j binding for its slf4j logging; Maven
// resolves everything else they need.
const kafkaPom = `<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>tidemark.local</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>` + KafkaVersion + `</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.25.5</version></dependency>
  </dependencies>
</project>
`

// KafkaCacheDir is where the broker's jars are kept between runs, outside
// any repository: $XDG_CACHE_HOME/tidemark/kafka-<version> (or ~/.cache/...).
// TIDEMARK_KAFKA_CACHE overrides it.
func KafkaCacheDir() (string, error) {
	if d := os.Getenv("TIDEMARK_KAFKA_CACHE"); d != "" {
		return filepath.Abs(d)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("localserver: no cache directory for the Kafka jars (set TIDEMARK_KAFKA_CACHE): %w", err)
	}
	return filepath.Join(base, "tidemark", "kafka-"+KafkaVersion), nil
}

// KafkaJars returns the directory holding the Apache Kafka broker's jars,
// fetching them with Maven the first time. Concurrent callers (parallel test
// binaries) wait for one fetch under a file lock.
func KafkaJars(ctx context.Context) (string, error) {
	dir, err := KafkaCacheDir()
	if err != nil {
		return "", err
	}
	libs := filepath.Join(dir, "libs")
	done := filepath.Join(dir, "complete")
	if _, err := os.Stat(done); err == nil {
		return libs, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("localserver: kafka cache dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("localserver: kafka cache lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("localserver: kafka cache lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(done); err == nil {
		return libs, nil // another process fetched them while we waited
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", errors.New("localserver: Maven (mvn) not found on PATH; it fetches the Apache Kafka broker: install it with `apt-get install -y maven`")
	}
	pom := filepath.Join(dir, "pom.xml")
	if err := os.WriteFile(pom, []byte(kafkaPom), 0o644); err != nil {
		return "", err
	}
	tmp := libs + ".tmp"
	os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, mvn, "-q", "-B", "-f", pom, "dependency:copy-dependencies",
		"-DincludeScope=runtime", "-DoutputDirectory="+tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("localserver: fetch Apache Kafka %s with Maven: %v\n%s", KafkaVersion, err, tailString(string(out), 3000))
	}
	os.RemoveAll(libs)
	if err := os.Rename(tmp, libs); err != nil {
		return "", err
	}
	if err := os.WriteFile(done, []byte(KafkaVersion+"\n"), 0o644); err != nil {
		return "", err
	}
	return libs, nil
}

// JavaPath finds java: $JAVA_HOME/bin/java, else java on PATH. Kafka 4
// brokers need Java 17 or newer.
func JavaPath() (string, error) {
	if h := os.Getenv("JAVA_HOME"); h != "" {
		p := filepath.Join(h, "bin", "java")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", errors.New("localserver: java not found (JAVA_HOME or PATH); the Apache Kafka broker needs Java 17 or newer: install it with `apt-get install -y openjdk-17-jre-headless`")
	}
	return p, nil
}

func tailString(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}
