import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.accumulators.LongCounter;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceOutput;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SourceSplit;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.connector.source.SplitsAssignment;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.api.java.tuple.Tuple6;
import org.apache.flink.api.java.typeutils.ResultTypeQueryable;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.core.io.InputStatus;
import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.streaming.api.datastream.WindowedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.windowing.WindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.EventTimeSessionWindows;
import org.apache.flink.streaming.api.windowing.assigners.SlidingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingProcessingTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.WindowAssigner;
import org.apache.flink.streaming.api.windowing.triggers.CountTrigger;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/**
 * The bench's real-Flink anchor: the bench's job replayed through a throughput-tuned Flink
 * DataStream program, as a team replays an archive through its live job.
 *
 * <p>The archive is one file per Kafka partition (written by bench/flink_replay.py: records in
 * offset order, duplicates removed, fixed width: event time, amount, key). {@link PartitionSource}
 * gives each file its own split and each split its own watermark generator, and reads a reader's
 * splits in turns of a Kafka poll's size, as a Kafka consumer does; a file-per-split source that
 * reads its splits one after another would make every later partition late. The job: bounded
 * out-of-orderness 5 s, periodic watermarks every 200 ms, key by user, the bench kind's windows,
 * an incremental aggregate (sum, count, mean, max), object reuse, heap state, a discarding sink.
 *
 * <p>Inexact by nature: the periodic watermark ticks on the wall clock, so which late records it
 * drops changes from run to run; it is the speed a replay reaches, not the plugin's answer.
 *
 * <p>Usage: {@code BenchReplay ARCHIVE_DIR KEY_WIDTH KIND PARALLELISM REPEAT [WARM_UP_DIR]};
 * prints one line per run: {@code run <ms> <firings>}.
 */
public final class BenchReplay {

    private static final long MINUTE = 60_000L;
    /** Records read from one split before the next split's turn: Kafka's max.poll.records. */
    private static final int TURN = 500;

    public static void main(String[] args) throws Exception {
        File archive = new File(args[0]);
        int keyWidth = Integer.parseInt(args[1]);
        String kind = args[2];
        int parallelism = Integer.parseInt(args[3]);
        int repeat = Integer.parseInt(args[4]);
        if (args.length > 5) {
            run(new File(args[5]), keyWidth, kind, parallelism);
            System.out.println("warmed up");
        }
        for (int i = 0; i < repeat; i++) {
            long started = System.nanoTime();
            long firings = run(archive, keyWidth, kind, parallelism);
            long ms = (System.nanoTime() - started) / 1_000_000L;
            System.out.println("run " + ms + " " + firings);
        }
    }

    static long run(File archive, int keyWidth, String kind, int parallelism) throws Exception {
        Configuration conf = new Configuration();
        conf.set(PipelineOptions.AUTO_WATERMARK_INTERVAL, Duration.ofMillis(200));
        conf.set(PipelineOptions.OBJECT_REUSE, true);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(parallelism);

        WatermarkStrategy<Tuple3<String, Long, Double>> watermarks =
                WatermarkStrategy.<Tuple3<String, Long, Double>>forBoundedOutOfOrderness(
                                Duration.ofSeconds(5))
                        .withTimestampAssigner((record, previous) -> record.f1);
        if (kind.equals("idleness 30s")) {
            watermarks = watermarks.withIdleness(Duration.ofSeconds(30));
        }
        WindowedStream<Tuple3<String, Long, Double>, String, TimeWindow> windowed =
                env.fromSource(new PartitionSource(archive, keyWidth), watermarks, "archive")
                        .keyBy(record -> record.f0, Types.STRING)
                        .window(assigner(kind));
        if (kind.contains("lateness")) {
            windowed = windowed.allowedLateness(Duration.ofMinutes(5));
        }
        if (kind.equals("per-record")) {
            windowed = windowed.trigger(CountTrigger.of(1));
        }
        windowed.aggregate(new Amounts(), new WithWindow())
                .map(new CountFirings())
                .sinkTo(new DiscardingSink<>());
        JobExecutionResult result = env.execute("bench replay: " + kind);
        Long firings = result.getAccumulatorResult("firings");
        return firings == null ? 0 : firings;
    }

    static WindowAssigner<Object, TimeWindow> assigner(String kind) {
        switch (kind) {
            case "sliding 5m/1m":
                return SlidingEventTimeWindows.of(Duration.ofMinutes(5), Duration.ofMinutes(1));
            case "processing-time":
                return TumblingProcessingTimeWindows.of(Duration.ofMinutes(5));
            case "session gap 5m":
            case "session+lateness":
                return (WindowAssigner) EventTimeSessionWindows.withGap(Duration.ofMinutes(5));
            case "tumbling":
            case "tumbling+lateness":
            case "per-record":
            case "idleness 30s":
                return TumblingEventTimeWindows.of(Duration.ofMinutes(5));
            default:
                throw new IllegalArgumentException("unknown bench kind: " + kind);
        }
    }

    /** The aggregate's state: Flink keeps it on the heap per key and window. */
    public static final class Acc {
        public long count;
        public double sum;
        public double max = Double.NEGATIVE_INFINITY;
    }

    static final class Amounts implements AggregateFunction<Tuple3<String, Long, Double>, Acc, Acc> {
        @Override
        public Acc createAccumulator() {
            return new Acc();
        }

        @Override
        public Acc add(Tuple3<String, Long, Double> record, Acc acc) {
            double amount = record.f2;
            acc.count++;
            acc.sum += amount;
            acc.max = Math.max(acc.max, amount);
            return acc;
        }

        @Override
        public Acc getResult(Acc acc) {
            return acc;
        }

        @Override
        public Acc merge(Acc a, Acc b) {
            a.count += b.count;
            a.sum += b.sum;
            a.max = Math.max(a.max, b.max);
            return a;
        }
    }

    static final class WithWindow
            implements WindowFunction<Acc, Tuple6<String, Long, Long, Double, Double, Double>, String, TimeWindow> {
        private final Tuple6<String, Long, Long, Double, Double, Double> out = new Tuple6<>();

        @Override
        public void apply(String key, TimeWindow window, Iterable<Acc> input,
                Collector<Tuple6<String, Long, Long, Double, Double, Double>> collector) {
            Acc acc = input.iterator().next();
            out.setFields(key, window.getStart(), acc.count, acc.sum, acc.sum / acc.count, acc.max);
            collector.collect(out);
        }
    }

    static final class CountFirings extends RichMapFunction<
            Tuple6<String, Long, Long, Double, Double, Double>, Tuple6<String, Long, Long, Double, Double, Double>> {
        private final LongCounter firings = new LongCounter();

        @Override
        public void open(OpenContext context) {
            getRuntimeContext().addAccumulator("firings", firings);
        }

        @Override
        public Tuple6<String, Long, Long, Double, Double, Double> map(
                Tuple6<String, Long, Long, Double, Double, Double> firing) {
            firings.add(1L);
            return firing;
        }
    }

    // ------------------------------------------------------------------- the archive's source

    /** One Kafka partition's file. */
    public static final class PartitionSplit implements SourceSplit {
        final String path;

        PartitionSplit(String path) {
            this.path = path;
        }

        @Override
        public String splitId() {
            return path;
        }
    }

    /** A bounded source with a split per partition file, assigned round-robin to readers. */
    static final class PartitionSource
            implements Source<Tuple3<String, Long, Double>, PartitionSplit, Void>,
                    ResultTypeQueryable<Tuple3<String, Long, Double>> {
        private final String dir;
        private final int keyWidth;

        PartitionSource(File dir, int keyWidth) {
            this.dir = dir.getAbsolutePath();
            this.keyWidth = keyWidth;
        }

        @Override
        public Boundedness getBoundedness() {
            return Boundedness.BOUNDED;
        }

        @Override
        public SplitEnumerator<PartitionSplit, Void> createEnumerator(
                SplitEnumeratorContext<PartitionSplit> context) {
            File[] files = new File(dir).listFiles((d, name) -> name.endsWith(".bin"));
            if (files == null || files.length == 0) {
                throw new IllegalArgumentException("no partition files in " + dir);
            }
            Arrays.sort(files);
            return new Assigner(context, files);
        }

        @Override
        public SplitEnumerator<PartitionSplit, Void> restoreEnumerator(
                SplitEnumeratorContext<PartitionSplit> context, Void checkpoint) {
            throw new UnsupportedOperationException("the bench replay takes no checkpoints");
        }

        @Override
        public SimpleVersionedSerializer<PartitionSplit> getSplitSerializer() {
            return new SplitSerializer();
        }

        @Override
        public SimpleVersionedSerializer<Void> getEnumeratorCheckpointSerializer() {
            return new NoCheckpoint();
        }

        @Override
        public SourceReader<Tuple3<String, Long, Double>, PartitionSplit> createReader(
                SourceReaderContext context) {
            return new Reader(keyWidth);
        }

        @Override
        public TypeInformation<Tuple3<String, Long, Double>> getProducedType() {
            return Types.TUPLE(Types.STRING, Types.LONG, Types.DOUBLE);
        }
    }

    /** Gives reader i the files i, i + n, i + 2n, ... when it registers, then no more. */
    static final class Assigner implements SplitEnumerator<PartitionSplit, Void> {
        private final SplitEnumeratorContext<PartitionSplit> context;
        private final File[] files;

        Assigner(SplitEnumeratorContext<PartitionSplit> context, File[] files) {
            this.context = context;
            this.files = files;
        }

        @Override
        public void start() {}

        @Override
        public void handleSplitRequest(int subtask, String host) {}

        @Override
        public void addSplitsBack(List<PartitionSplit> splits, int subtask) {
            throw new UnsupportedOperationException("the bench replay does not fail over");
        }

        @Override
        public void addReader(int subtask) {
            int readers = context.currentParallelism();
            List<PartitionSplit> mine = new ArrayList<>();
            for (int i = subtask; i < files.length; i += readers) {
                mine.add(new PartitionSplit(files[i].getAbsolutePath()));
            }
            Map<Integer, List<PartitionSplit>> assignment = new HashMap<>();
            assignment.put(subtask, mine);
            context.assignSplits(new SplitsAssignment<>(assignment));
            context.signalNoMoreSplits(subtask);
        }

        @Override
        public Void snapshotState(long checkpoint) {
            return null;
        }

        @Override
        public void close() {}
    }

    /** Reads its splits in turns of {@link #TURN} records, each through its split's output. */
    static final class Reader implements SourceReader<Tuple3<String, Long, Double>, PartitionSplit> {
        private final int keyWidth;
        private final ArrayDeque<OpenSplit> open = new ArrayDeque<>();
        private final List<PartitionSplit> pending = new ArrayList<>();
        private CompletableFuture<Void> available = new CompletableFuture<>();
        private boolean noMoreSplits;

        Reader(int keyWidth) {
            this.keyWidth = keyWidth;
        }

        @Override
        public void start() {}

        @Override
        public InputStatus pollNext(ReaderOutput<Tuple3<String, Long, Double>> output) throws IOException {
            for (PartitionSplit split : pending) {
                open.add(new OpenSplit(split, output.createOutputForSplit(split.splitId()), keyWidth));
            }
            pending.clear();
            OpenSplit split = open.poll();
            if (split == null) {
                if (noMoreSplits) {
                    return InputStatus.END_OF_INPUT;
                }
                if (available.isDone()) {
                    available = new CompletableFuture<>();
                }
                return InputStatus.NOTHING_AVAILABLE;
            }
            if (split.emit(TURN)) {
                open.add(split);
            } else {
                split.close();
                output.releaseOutputForSplit(split.split.splitId());
            }
            return open.isEmpty() && noMoreSplits ? InputStatus.END_OF_INPUT : InputStatus.MORE_AVAILABLE;
        }

        @Override
        public List<PartitionSplit> snapshotState(long checkpoint) {
            throw new UnsupportedOperationException("the bench replay takes no checkpoints");
        }

        @Override
        public CompletableFuture<Void> isAvailable() {
            return available;
        }

        @Override
        public void addSplits(List<PartitionSplit> splits) {
            pending.addAll(splits);
            available.complete(null);
        }

        @Override
        public void notifyNoMoreSplits() {
            noMoreSplits = true;
            available.complete(null);
        }

        @Override
        public void close() throws IOException {
            for (OpenSplit split : open) {
                split.close();
            }
        }
    }

    /** A partition file being read: fixed-width records (event time, amount, key bytes). */
    static final class OpenSplit {
        final PartitionSplit split;
        private final SourceOutput<Tuple3<String, Long, Double>> output;
        private final DataInputStream in;
        private final byte[] key;
        private final Tuple3<String, Long, Double> record = new Tuple3<>();

        OpenSplit(PartitionSplit split, SourceOutput<Tuple3<String, Long, Double>> output, int keyWidth)
                throws IOException {
            this.split = split;
            this.output = output;
            this.in = new DataInputStream(new BufferedInputStream(new FileInputStream(split.path), 1 << 20));
            this.key = new byte[keyWidth];
        }

        /** Emits up to {@code n} records; false once the file is exhausted. */
        boolean emit(int n) throws IOException {
            for (int i = 0; i < n; i++) {
                long eventTime;
                try {
                    eventTime = in.readLong();
                } catch (EOFException end) {
                    return false;
                }
                double amount = in.readDouble();
                in.readFully(key);
                record.setFields(new String(key, StandardCharsets.ISO_8859_1), eventTime, amount);
                output.collect(record);
            }
            return true;
        }

        void close() throws IOException {
            in.close();
        }
    }

    static final class SplitSerializer implements SimpleVersionedSerializer<PartitionSplit> {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(PartitionSplit split) throws IOException {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            try (DataOutputStream out = new DataOutputStream(bytes)) {
                out.writeUTF(split.path);
            }
            return bytes.toByteArray();
        }

        @Override
        public PartitionSplit deserialize(int version, byte[] serialized) throws IOException {
            try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(serialized))) {
                return new PartitionSplit(in.readUTF());
            }
        }
    }

    static final class NoCheckpoint implements SimpleVersionedSerializer<Void> {
        @Override
        public int getVersion() {
            return 1;
        }

        @Override
        public byte[] serialize(Void nothing) {
            return new byte[0];
        }

        @Override
        public Void deserialize(int version, byte[] serialized) {
            return null;
        }
    }
}
