package tidemark.bench;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.source.SourceRecord;

import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;

/**
 * The Debezium arm of `tidemark-lab bench e2e --debezium`
 * (lab/bench/e2ebench/debezium.go): Debezium's embedded engine runs the
 * connector the harness configures, and its callback records, for every
 * change, the transaction's commit time (the event's source.ts_us, the
 * commit timestamp Postgres sends with the transaction, as tidemark's
 * capture and pg_recvlogical read it) and the time of the callback, in
 * microseconds since the epoch. The callback only appends two longs to a
 * buffer; a writer thread flushes the buffer to the samples file every
 * 20 ms as lines "commit_us callback_us", which the harness tails.
 *
 * Usage: java -jar tidemark-bench-debezium.jar SAMPLES_FILE key=value...
 * (the connector's and engine's properties).
 */
public final class DebeziumLatency {
    private DebeziumLatency() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: java -jar tidemark-bench-debezium.jar SAMPLES_FILE key=value...");
            System.exit(2);
        }
        Properties props = new Properties();
        // Offsets in memory: each run starts from a fresh slot.
        props.setProperty("name", "tidemark-bench-debezium");
        props.setProperty("offset.storage", "org.apache.kafka.connect.storage.MemoryOffsetBackingStore");
        props.setProperty("offset.flush.interval.ms", "10000");
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq <= 0) {
                System.err.println("not a key=value property: " + args[i]);
                System.exit(2);
            }
            props.setProperty(args[i].substring(0, eq), args[i].substring(eq + 1));
        }

        Recorder rec = new Recorder(Path.of(args[0]));
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        AtomicReference<String> failMsg = new AtomicReference<>();
        DebeziumEngine<RecordChangeEvent<SourceRecord>> engine = DebeziumEngine
                .create(ChangeEventFormat.of(Connect.class))
                .using(props)
                .notifying(rec::onEvent)
                .using((success, message, error) -> {
                    if (!success) {
                        failMsg.set(message);
                        failure.set(error);
                    }
                    done.countDown();
                })
                .build();
        ExecutorService exec = Executors.newSingleThreadExecutor();
        exec.execute(engine);
        // SIGTERM from the harness: stop the engine, flush what was recorded.
        Thread hook = new Thread(() -> {
            try {
                engine.close();
                done.await(30, TimeUnit.SECONDS);
            } catch (Exception e) {
                e.printStackTrace();
            }
            rec.close();
        });
        Runtime.getRuntime().addShutdownHook(hook);
        done.await();
        if (failMsg.get() != null) {
            System.err.println("debezium engine failed: " + failMsg.get());
            if (failure.get() != null) {
                failure.get().printStackTrace();
            }
            Runtime.getRuntime().removeShutdownHook(hook);
            rec.close();
            System.exit(1);
        }
    }

    /** Recorder buffers samples and writes them out on a thread of its own. */
    static final class Recorder {
        private final BufferedWriter out;
        private final Thread writer;
        private long[] buf = new long[1 << 16];
        private int n; // longs in buf
        private String note; // "# ..." line not yet written
        private boolean sourceSeen;
        private volatile boolean closed;

        Recorder(Path file) throws IOException {
            out = Files.newBufferedWriter(file, StandardCharsets.US_ASCII);
            writer = new Thread(this::loop, "samples-writer");
            writer.setDaemon(true);
            writer.start();
        }

        void onEvent(RecordChangeEvent<SourceRecord> ev) {
            Instant now = Instant.now();
            long at = now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
            Object v = ev.record().value();
            if (!(v instanceof Struct)) {
                return; // a tombstone or a heartbeat: no change
            }
            Struct value = (Struct) v;
            if (value.schema().field("source") == null) {
                return;
            }
            Struct src = value.getStruct("source");
            long commit;
            boolean micros = src.schema().field("ts_us") != null && src.get("ts_us") != null;
            if (micros) {
                commit = src.getInt64("ts_us");
            } else {
                commit = src.getInt64("ts_ms") * 1_000L;
            }
            synchronized (this) {
                if (!sourceSeen) {
                    sourceSeen = true;
                    note = micros ? "# commit time: source.ts_us" : "# commit time: source.ts_ms (1 ms resolution)";
                }
                if (n + 2 > buf.length) {
                    buf = java.util.Arrays.copyOf(buf, buf.length * 2);
                }
                buf[n++] = commit;
                buf[n++] = at;
            }
        }

        private void loop() {
            long[] spare = new long[1 << 16];
            StringBuilder sb = new StringBuilder(1 << 16);
            while (true) {
                boolean last = closed;
                long[] full;
                int count;
                String head;
                synchronized (this) {
                    full = buf;
                    count = n;
                    head = note;
                    note = null;
                    if (spare.length < buf.length) {
                        spare = new long[buf.length];
                    }
                    buf = spare;
                    n = 0;
                }
                sb.setLength(0);
                if (head != null) {
                    sb.append(head).append('\n');
                }
                for (int i = 0; i < count; i += 2) {
                    sb.append(full[i]).append(' ').append(full[i + 1]).append('\n');
                }
                spare = full;
                try {
                    if (sb.length() > 0) {
                        out.append(sb);
                        out.flush();
                    }
                    if (last) {
                        out.close();
                        return;
                    }
                    Thread.sleep(20);
                } catch (IOException e) {
                    e.printStackTrace();
                    return;
                } catch (InterruptedException e) {
                    closed = true;
                }
            }
        }

        void close() {
            closed = true;
            try {
                writer.join(5_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
