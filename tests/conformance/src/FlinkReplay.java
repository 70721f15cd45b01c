import java.io.BufferedReader;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.flink.api.common.eventtime.BoundedOutOfOrdernessWatermarks;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.SourceOutput;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.event.WatermarkEvent;
import org.apache.flink.runtime.metrics.groups.UnregisteredMetricGroups;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.datastream.WindowedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.operators.source.ProgressiveTimestampsAndWatermarks;
import org.apache.flink.streaming.api.operators.source.TimestampsAndWatermarks;
import org.apache.flink.streaming.api.transformations.OneInputTransformation;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.api.windowing.assigners.EventTimeSessionWindows;
import org.apache.flink.streaming.api.windowing.assigners.ProcessingTimeSessionWindows;
import org.apache.flink.streaming.api.windowing.assigners.SlidingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.SlidingProcessingTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingProcessingTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.WindowAssigner;
import org.apache.flink.streaming.api.windowing.triggers.CountTrigger;
import org.apache.flink.streaming.api.windowing.triggers.Trigger;
import org.apache.flink.streaming.api.windowing.triggers.TriggerResult;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.streaming.runtime.io.PushingAsyncDataInput;
import org.apache.flink.streaming.runtime.streamrecord.LatencyMarker;
import org.apache.flink.streaming.runtime.streamrecord.RecordAttributes;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.TestProcessingTimeService;
import org.apache.flink.streaming.runtime.watermarkstatus.StatusWatermarkValve;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.streaming.util.KeyedOneInputStreamOperatorTestHarness;
import org.apache.flink.util.OutputTag;
import org.apache.flink.util.clock.ManualClock;

/**
 * Replays an archived, keyed, windowed job through real Flink classes, deterministically.
 *
 * <p>Real Flink: each source is a {@link ProgressiveTimestampsAndWatermarks} (what
 * SourceOperator uses: one {@code SourceOutputWithWatermarks} and watermark generator per split,
 * combined by its {@code WatermarkOutputMultiplexer}, periodic emission scheduled on a
 * processing-time service), built from a real {@link WatermarkStrategy}
 * ({@code forBoundedOutOfOrderness}, {@code withIdleness}); sources are combined by a
 * {@link StatusWatermarkValve} (a union's input gate); the {@code WindowOperator} is taken from
 * a DataStream job's transformation ({@code keyBy().window().trigger().allowedLateness()
 * .sideOutputLateData().aggregate()}) and run in Flink's
 * {@link KeyedOneInputStreamOperatorTestHarness}. Ours: the loop that feeds records in the
 * given (inferred processing time) order, advances the test clocks, and logs what comes out.
 *
 * <p>A feed may also restart the job (tests/conformance/live.py): {@code checkpoint C}
 * snapshots the window operator after everything at instants up to C; {@code restore R R2}
 * fails the job at R (after the ticks before R) and starts it again at R2, the window operator
 * initialised from that snapshot and new sources, whose watermarks start from Long.MIN_VALUE
 * (Flink checkpoints none). The records after it are those read again and any later ones.
 *
 * <p>Usage: {@code FlinkReplay in1 out1 [in2 out2 ...]} (one JVM for many scenarios).
 */
public final class FlinkReplay {

    /** An archived record; {@code index} is its place in the feed. */
    public static class Rec {
        public int index;
        public int topic;
        public int partition;
        public long offset;
        public long et;
        public long pt;
        public String key;
        public double value;

        public Rec() {}
    }

    /** count, sum, min, max: order-independent, as the plugin's aggregations. */
    public static class Acc {
        public long count;
        public double sum;
        public double min = Double.POSITIVE_INFINITY;
        public double max = Double.NEGATIVE_INFINITY;

        public Acc() {}
    }

    static final class Aggregate implements AggregateFunction<Rec, Acc, Acc> {
        @Override
        public Acc createAccumulator() {
            return new Acc();
        }

        @Override
        public Acc add(Rec r, Acc a) {
            a.count += 1;
            a.sum += r.value;
            a.min = Math.min(a.min, r.value);
            a.max = Math.max(a.max, r.value);
            return a;
        }

        @Override
        public Acc getResult(Acc a) {
            return a;
        }

        @Override
        public Acc merge(Acc a, Acc b) {
            Acc m = new Acc();
            m.count = a.count + b.count;
            m.sum = a.sum + b.sum;
            m.min = Math.min(a.min, b.min);
            m.max = Math.max(a.max, b.max);
            return m;
        }
    }

    static final class Emit extends ProcessWindowFunction<Acc, String, String, TimeWindow> {
        @Override
        public void process(String key, Context ctx, Iterable<Acc> in, org.apache.flink.util.Collector<String> out) {
            Acc a = in.iterator().next();
            TimeWindow w = ctx.window();
            out.collect(key + " " + w.getStart() + " " + w.getEnd() + " " + a.count + " " + a.sum + " " + a.min + " " + a.max);
        }
    }

    /** Which (record, window) pairs the WindowOperator accepted: it calls the trigger's
     * onElement exactly for those. Delegates everything, so the job behaves as unwrapped. */
    static final class Observed extends Trigger<Object, TimeWindow> {
        static final List<long[]> ACCEPTED = new ArrayList<>(); // (record index, window start)
        private final Trigger<Object, TimeWindow> inner;

        @SuppressWarnings("unchecked")
        Observed(Trigger<?, ?> inner) {
            this.inner = (Trigger<Object, TimeWindow>) inner;
        }

        @Override
        public TriggerResult onElement(Object e, long ts, TimeWindow w, TriggerContext ctx) throws Exception {
            ACCEPTED.add(new long[] {((Rec) e).index, w.getStart()});
            return inner.onElement(e, ts, w, ctx);
        }

        @Override
        public TriggerResult onProcessingTime(long t, TimeWindow w, TriggerContext ctx) throws Exception {
            return inner.onProcessingTime(t, w, ctx);
        }

        @Override
        public TriggerResult onEventTime(long t, TimeWindow w, TriggerContext ctx) throws Exception {
            return inner.onEventTime(t, w, ctx);
        }

        @Override
        public boolean canMerge() {
            return inner.canMerge();
        }

        @Override
        public void onMerge(TimeWindow w, OnMergeContext ctx) throws Exception {
            inner.onMerge(w, ctx);
        }

        @Override
        public void clear(TimeWindow w, TriggerContext ctx) throws Exception {
            inner.clear(w, ctx);
        }
    }

    /** A generator that emits after every event (SEMANTICS "on_event"): Flink's own
     * BoundedOutOfOrdernessWatermarks, asked for its watermark after each onEvent. */
    static final class OnEvent implements WatermarkGenerator<Rec> {
        private final BoundedOutOfOrdernessWatermarks<Rec> inner;

        OnEvent(Duration bound) {
            inner = new BoundedOutOfOrdernessWatermarks<>(bound);
        }

        @Override
        public void onEvent(Rec r, long ts, WatermarkOutput out) {
            inner.onEvent(r, ts, out);
            inner.onPeriodicEmit(out);
        }

        @Override
        public void onPeriodicEmit(WatermarkOutput out) {
            inner.onPeriodicEmit(out);
        }
    }

    // ---------------------------------------------------------------- one scenario

    private final Map<String, String> conf = new HashMap<>();
    private final List<String> topicNames = new ArrayList<>();
    private final List<Long> topicBounds = new ArrayList<>();
    private final List<int[]> splits = new ArrayList<>(); // (topic, partition)
    private final List<Rec> records = new ArrayList<>();
    private final List<long[]> controls = new ArrayList<>(); // (before record, kind, time, time)
    private final PrintWriter out;

    private KeyedOneInputStreamOperatorTestHarness<String, Rec, String> window;
    private final OutputTag<Rec> lateTag = new OutputTag<>("late", TypeInformation.of(Rec.class));
    private long scale; // window-harness ms per processing-time ms (2 for processing-time windows)
    private long watermark = Long.MIN_VALUE;
    private OperatorSubtaskState checkpoint;

    // The sources and their clocks, rebuilt on a restore: Flink does not checkpoint watermarks.
    private long interval;
    private TestProcessingTimeService sourceTime;
    private ManualClock clock;
    private long tick;
    private long now;
    private List<ReaderOutput<Rec>> readers;
    private Map<String, SourceOutput<Rec>> splitOutputs;

    private FlinkReplay(Path in, PrintWriter out) throws IOException {
        this.out = out;
        try (BufferedReader reader = Files.newBufferedReader(in)) {
            String line;
            while ((line = reader.readLine()) != null) {
                String[] f = line.trim().split(" ");
                switch (f[0]) {
                    case "" -> { }
                    case "topic" -> {
                        topicNames.add(f[1]);
                        topicBounds.add(Long.parseLong(f[2]));
                    }
                    case "split" -> splits.add(new int[] {Integer.parseInt(f[1]), Integer.parseInt(f[2])});
                    case "r" -> {
                        Rec r = new Rec();
                        r.index = records.size();
                        r.topic = Integer.parseInt(f[1]);
                        r.partition = Integer.parseInt(f[2]);
                        r.offset = Long.parseLong(f[3]);
                        r.et = Long.parseLong(f[4]);
                        r.pt = Long.parseLong(f[5]);
                        r.key = f[6];
                        r.value = Double.parseDouble(f[7]);
                        records.add(r);
                    }
                    // A checkpoint at time f[1]; a failure at f[1] and a restore from the
                    // last checkpoint at f[2]: both between the records around them.
                    case "checkpoint" -> controls.add(new long[] {records.size(), 0, Long.parseLong(f[1]), 0});
                    case "restore" -> controls.add(
                            new long[] {records.size(), 1, Long.parseLong(f[1]), Long.parseLong(f[2])});
                    default -> conf.put(f[0], f[1]);
                }
            }
        }
    }

    private long num(String name) {
        return Long.parseLong(conf.getOrDefault(name, "0"));
    }

    private boolean eventTime() {
        return conf.get("domain").equals("event");
    }

    /** The WindowOperator a user's DataStream program builds, with the job's options. */
    @SuppressWarnings("unchecked")
    private OneInputStreamOperator<Rec, String> windowOperator() {
        Duration size = Duration.ofMillis(num("size") * scale);
        Duration slide = Duration.ofMillis(num("slide") * scale);
        Duration offset = Duration.ofMillis(num("offset") * scale);
        boolean sliding = num("slide") > 0;
        Duration gap = Duration.ofMillis(num("gap") * scale);
        WindowAssigner<Object, TimeWindow> assigner;
        if (num("gap") > 0) {
            assigner = eventTime() ? EventTimeSessionWindows.withGap(gap) : ProcessingTimeSessionWindows.withGap(gap);
        } else if (eventTime()) {
            assigner = sliding ? SlidingEventTimeWindows.of(size, slide, offset) : TumblingEventTimeWindows.of(size, offset);
        } else {
            assigner = sliding ? SlidingProcessingTimeWindows.of(size, slide, offset) : TumblingProcessingTimeWindows.of(size, offset);
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        DataStream<Rec> source = env.fromData(Rec.class, new Rec());
        WindowedStream<Rec, String, TimeWindow> windowed = source.keyBy(r -> r.key, Types.STRING).window(assigner);
        Trigger<?, ?> trigger = conf.get("trigger").equals("per_record") ? CountTrigger.of(1) : assigner.getDefaultTrigger();
        windowed = windowed.trigger(new Observed(trigger));
        if (eventTime()) {
            windowed = windowed.allowedLateness(Duration.ofMillis(num("lateness")));
        }
        SingleOutputStreamOperator<String> result = windowed.sideOutputLateData(lateTag)
                .aggregate(new Aggregate(), new Emit(), TypeInformation.of(Acc.class), TypeInformation.of(Acc.class), Types.STRING);
        return ((OneInputTransformation<Rec, String>) result.getTransformation()).getOperator();
    }

    /** Where a source's records and watermarks go: the window operator, through the valve. */
    private final class SourceChannel implements PushingAsyncDataInput.DataOutput<Rec> {
        private final int channel;
        private final StatusWatermarkValve valve;
        private final PushingAsyncDataInput.DataOutput<Rec> valveOutput;

        SourceChannel(int channel, StatusWatermarkValve valve, PushingAsyncDataInput.DataOutput<Rec> valveOutput) {
            this.channel = channel;
            this.valve = valve;
            this.valveOutput = valveOutput;
        }

        @Override
        public void emitRecord(StreamRecord<Rec> r) throws Exception {
            window.processElement(new StreamRecord<>(r.getValue(), r.getTimestamp()));
            drain("e" + r.getValue().index, r.getValue().pt); // fired by the record itself
        }

        @Override
        public void emitWatermark(Watermark w) throws Exception {
            valve.inputWatermark(w, channel, valveOutput);
        }

        @Override
        public void emitWatermarkStatus(WatermarkStatus s) throws Exception {
            valve.inputWatermarkStatus(s, channel, valveOutput);
        }

        @Override
        public void emitLatencyMarker(LatencyMarker m) {}

        @Override
        public void emitRecordAttributes(RecordAttributes a) {}

        @Override
        public void emitWatermark(WatermarkEvent e) {}
    }

    /** The window operator's input: what the valve lets through. */
    private final class OperatorInput implements PushingAsyncDataInput.DataOutput<Rec> {
        @Override
        public void emitRecord(StreamRecord<Rec> r) {
            throw new IllegalStateException("records do not pass the valve");
        }

        @Override
        public void emitWatermark(Watermark w) throws Exception {
            watermark = w.getTimestamp();
            window.processWatermark(w);
        }

        @Override
        public void emitWatermarkStatus(WatermarkStatus s) throws Exception {
            window.processWatermarkStatus(s);
        }

        @Override
        public void emitLatencyMarker(LatencyMarker m) {}

        @Override
        public void emitRecordAttributes(RecordAttributes a) {}

        @Override
        public void emitWatermark(WatermarkEvent e) {}
    }

    private static final TimestampsAndWatermarks.WatermarkUpdateListener NO_LISTENER =
            new TimestampsAndWatermarks.WatermarkUpdateListener() {
                @Override
                public void updateIdle(boolean idle) {}

                @Override
                public void updateCurrentEffectiveWatermark(long w) {}

                @Override
                public void updateCurrentSplitWatermark(String split, long w) {}

                @Override
                public void updateCurrentSplitIdle(String split, boolean idle) {}

                @Override
                public void splitFinished(String split) {}
            };

    private WatermarkStrategy<Rec> strategy(long bound) {
        Duration b = Duration.ofMillis(bound);
        WatermarkStrategy<Rec> s = conf.get("emission").equals("on_event")
                ? ctx -> new OnEvent(b)
                : WatermarkStrategy.forBoundedOutOfOrderness(b);
        long idleness = num("idleness");
        return idleness > 0 ? s.withIdleness(Duration.ofMillis(idleness)) : s;
    }

    /** Print whatever the window operator emitted since the last call, caused by {@code cause}. */
    private void drain(String cause, long time) {
        Object o;
        while ((o = window.getOutput().poll()) != null) {
            if (o instanceof StreamRecord<?> r) {
                String[] f = ((String) r.getValue()).split(" ");
                long start = Long.parseLong(f[1]) / scale;
                long end = Long.parseLong(f[2]) / scale;
                out.println("fire " + cause + " " + time + " " + f[0] + " " + start + " " + end + " " + watermark
                        + " " + f[3] + " " + f[4] + " " + f[5] + " " + f[6]);
            }
        }
    }

    /** A new window operator in Flink's harness, from {@code state} if not null. */
    private void openWindow(OperatorSubtaskState state) throws Exception {
        window = new KeyedOneInputStreamOperatorTestHarness<>(windowOperator(), r -> r.key, Types.STRING);
        if (state != null) {
            window.setup();
            window.initializeState(state);
        }
        window.open();
        watermark = Long.MIN_VALUE;
    }

    /** The sources, their watermark generators and the valve, started at processing time
     * {@code first}. */
    private void startSources(long first) throws Exception {
        boolean combineMax = conf.get("combine").equals("max");
        // Sources: one per topic (MIN mode: splits = partitions, Flink's multiplexer combines
        // them). MAX mode: one reader whose main output (one generator) sees every record.
        int nSources = combineMax ? 1 : topicNames.size();
        StatusWatermarkValve valve = new StatusWatermarkValve(nSources);
        OperatorInput operatorInput = new OperatorInput();
        sourceTime = new TestProcessingTimeService();
        // The idleness clock: ms of processing time, shifted by a day because IdlenessTimer
        // reads a relative time of 0 as "no inactivity timer started".
        clock = new ManualClock(Duration.ofDays(1).toNanos());
        // The job starts with its first record: the periodic timer's first tick is the first
        // multiple of I at or after it (SEMANTICS section 2; the plugin's convention).
        tick = interval > 0 ? Math.floorDiv(first + interval - 1, interval) * interval : Long.MAX_VALUE;
        long base = interval > 0 ? tick - interval : first;
        sourceTime.setCurrentTime(base);
        now = base;
        clock.advanceTime(Duration.ofMillis(base));
        readers = new ArrayList<>();
        List<ProgressiveTimestampsAndWatermarks<Rec>> sources = new ArrayList<>();
        for (int i = 0; i < nSources; i++) {
            ProgressiveTimestampsAndWatermarks<Rec> source = new ProgressiveTimestampsAndWatermarks<>(
                    (r, previous) -> r.et,
                    strategy(topicBounds.get(i)),
                    new TimestampsAndWatermarks.TimestampsAndWatermarksContextProvider(new UnregisteredMetricsGroup()),
                    sourceTime,
                    Duration.ofMillis(interval),
                    clock,
                    clock,
                    UnregisteredMetricGroups.createUnregisteredTaskMetricGroup().getIOMetricGroup());
            readers.add(source.createMainOutput(new SourceChannel(i, valve, operatorInput), NO_LISTENER));
            sources.add(source);
        }
        splitOutputs = new LinkedHashMap<>();
        if (!combineMax) { // every split assigned at the start, before any record
            for (int[] s : splits) {
                splitOutputs.put(s[0] + "/" + s[1], readers.get(s[0]).createOutputForSplit("p" + s[1]));
            }
        }
        for (ProgressiveTimestampsAndWatermarks<Rec> source : sources) {
            source.startPeriodicWatermarkEmits();
        }
    }

    /** The periodic ticks strictly before {@code before}. */
    private void ticksBefore(long before) throws Exception {
        while (tick < before) {
            clock.advanceTime(Duration.ofMillis(tick - now));
            now = tick;
            sourceTime.setCurrentTime(tick);
            drain("t", tick);
            tick += interval;
        }
    }

    /** What a control line does once the records before it are in: a checkpoint at C after
     * everything at instants up to C; a failure at R after everything before R, then a restore
     * of the last checkpoint with sources started afresh at R'. */
    private void control(long[] c) throws Exception {
        if (c[1] == 0) {
            ticksBefore(c[2] + 1);
            checkpoint = window.snapshot(c[2], c[2]);
            out.println("checkpoint " + c[2]);
            return;
        }
        ticksBefore(c[2]);
        printSideOutput();
        window.close();
        openWindow(checkpoint);
        startSources(c[3]);
        out.println("restore " + c[2] + " " + c[3]);
    }

    private void printSideOutput() {
        for (StreamRecord<Rec> late : window.getSideOutput(lateTag) == null ? List.<StreamRecord<Rec>>of() : window.getSideOutput(lateTag)) {
            out.println("side " + late.getValue().index);
        }
    }

    private void run() throws Exception {
        scale = eventTime() ? 1 : 2;
        interval = num("interval");
        boolean combineMax = conf.get("combine").equals("max");
        Observed.ACCEPTED.clear();
        openWindow(null);
        startSources(records.get(0).pt);

        int nextControl = 0;
        for (Rec r : records) {
            while (nextControl < controls.size() && controls.get(nextControl)[0] == r.index) {
                control(controls.get(nextControl++));
            }
            ticksBefore(r.pt); // a record and a tick at the same ms: the record first
            clock.advanceTime(Duration.ofMillis(r.pt - now));
            now = r.pt;
            if (!eventTime()) { // timers due before this ms first (Flink delays them by 1 ms)
                window.setProcessingTime(Math.max(window.getProcessingTime(), r.pt * scale - 1));
                drain("c", -1);
                window.setProcessingTime(r.pt * scale);
            }
            if (combineMax) {
                readers.get(0).collect(r);
            } else {
                splitOutputs.get(r.topic + "/" + r.partition).collect(r);
            }
            drain("r" + r.index, r.pt);
        }
        while (nextControl < controls.size()) {
            control(controls.get(nextControl++));
        }
        // The archive's horizon: ticks up to the first one at or after the last record. Later
        // ones would act on a future the archive does not hold (and never see end of input).
        long last = records.get(records.size() - 1).pt;
        if (interval > 0) {
            ticksBefore(Math.floorDiv(last + interval - 1, interval) * interval + 1);
        }
        if (!eventTime()) { // a live job's clock goes on: every processing-time window fires
            window.setProcessingTime(Long.MAX_VALUE / 4);
            drain("c", -1);
        }

        // Dropped (record, window) pairs: the windows the assigner gives minus those accepted.
        // A session record is dropped when its merged session is late: its own window
        // [t, t + gap) is reported, as the plugin does.
        Map<Integer, List<Long>> accepted = new HashMap<>();
        for (long[] a : Observed.ACCEPTED) {
            accepted.computeIfAbsent((int) a[0], k -> new ArrayList<>()).add(a[1]);
        }
        long size = num("size");
        long slide = num("slide") > 0 ? num("slide") : size;
        long offset = num("offset");
        for (Rec r : records) {
            long t = eventTime() ? r.et : r.pt;
            List<Long> got = accepted.getOrDefault(r.index, List.of());
            if (num("gap") > 0) {
                if (got.isEmpty()) {
                    out.println("drop " + r.index + " " + r.key + " " + t);
                    out.println("record " + r.index + " 1 1");
                }
                continue;
            }
            int windows = 0;
            int dropped = 0;
            for (long start = TimeWindow.getWindowStartWithOffset(t, offset, slide); start > t - size; start -= slide) {
                windows++;
                if (!got.contains(start * scale)) {
                    dropped++;
                    out.println("drop " + r.index + " " + r.key + " " + start);
                }
            }
            if (dropped > 0) {
                out.println("record " + r.index + " " + windows + " " + dropped);
            }
        }
        printSideOutput();
        window.close();
    }

    public static void main(String[] args) throws Exception {
        for (int i = 0; i + 1 < args.length; i += 2) {
            try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(Path.of(args[i + 1])))) {
                new FlinkReplay(Path.of(args[i]), out).run();
            }
        }
    }
}
