import java.io.BufferedReader;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.WindowedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.SlidingProcessingTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingProcessingTimeWindows;
import org.apache.flink.streaming.api.windowing.triggers.CountTrigger;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.CloseableIterator;
import org.apache.flink.util.Collector;

/**
 * Processing-time windows on a real MiniCluster, against the wall clock.
 *
 * <p>One job: a source of every record (in processing-time order), paced by a map chained to it
 * that releases record {@code pt} at wall time {@code base + pt * scale} ({@code base} a multiple
 * of every scaled window slide, so wall-clock windows map back to the plugin's); buffer timeout
 * 0; then per window spec, {@code keyBy(scenario/key).window(*ProcessingTimeWindows)
 * [.trigger(CountTrigger.of(1))].aggregate(...)}, the firing's own processing time logged. Nothing
 * here is a Flink class of ours: only the pacing and the logging.
 *
 * <p>Usage: {@code FlinkWallClock in out}. Input: {@code scale S}, {@code spec id size slide
 * offset trigger} lines, {@code r spec scenario index pt key value} lines sorted by pt.
 */
public final class FlinkWallClock {

    /** Holds each record until its wall-clock time; the first record fixes {@code base}. */
    static final class Pace extends RichMapFunction<FlinkReplay.Rec, FlinkReplay.Rec> {
        private final long scale;
        private final long grid;
        private final long firstPt;
        private long base = -1;

        Pace(long scale, long grid, long firstPt) {
            this.scale = scale;
            this.grid = grid;
            this.firstPt = firstPt;
        }

        @Override
        public void open(OpenContext ctx) {}

        @Override
        public FlinkReplay.Rec map(FlinkReplay.Rec r) throws Exception {
            if (base < 0) { // 500 ms for the pipeline to settle, then onto the windows' grid
                long earliest = System.currentTimeMillis() + 500 - firstPt * scale;
                base = Math.floorDiv(earliest + grid - 1, grid) * grid;
                System.out.println("base " + base);
            }
            long due = base + r.pt * scale;
            long wait;
            while ((wait = due - System.currentTimeMillis()) > 0) {
                Thread.sleep(wait);
            }
            return r;
        }
    }

    public static class Acc {
        public long count;
        public double sum;
        public double min = Double.POSITIVE_INFINITY;
        public double max = Double.NEGATIVE_INFINITY;
        public String indices = "";

        public Acc() {}
    }

    static final class Aggregate implements AggregateFunction<FlinkReplay.Rec, Acc, Acc> {
        @Override
        public Acc createAccumulator() {
            return new Acc();
        }

        @Override
        public Acc add(FlinkReplay.Rec r, Acc a) {
            a.count += 1;
            a.sum += r.value;
            a.min = Math.min(a.min, r.value);
            a.max = Math.max(a.max, r.value);
            a.indices = a.indices.isEmpty() ? "" + r.index : a.indices + "," + r.index;
            return a;
        }

        @Override
        public Acc getResult(Acc a) {
            return a;
        }

        @Override
        public Acc merge(Acc a, Acc b) {
            throw new UnsupportedOperationException("time windows do not merge");
        }
    }

    static final class Emit extends ProcessWindowFunction<Acc, String, String, TimeWindow> {
        private final int spec;

        Emit(int spec) {
            this.spec = spec;
        }

        @Override
        public void process(String key, Context ctx, Iterable<Acc> in, Collector<String> out) {
            Acc a = in.iterator().next();
            out.collect("fire " + spec + " " + key + " " + ctx.window().getStart() + " " + ctx.window().getEnd() + " "
                    + ctx.currentProcessingTime() + " " + a.count + " " + a.sum + " " + a.min + " " + a.max + " " + a.indices);
        }
    }

    @SuppressWarnings("unchecked")
    public static void main(String[] args) throws Exception {
        long scale = 1;
        List<long[]> specs = new ArrayList<>(); // id, size, slide, offset, perRecord
        List<FlinkReplay.Rec> records = new ArrayList<>();
        try (BufferedReader reader = Files.newBufferedReader(Path.of(args[0]))) {
            String line;
            while ((line = reader.readLine()) != null) {
                String[] f = line.trim().split(" ");
                switch (f[0]) {
                    case "scale" -> scale = Long.parseLong(f[1]);
                    case "spec" -> specs.add(new long[] {Long.parseLong(f[1]), Long.parseLong(f[2]),
                        Long.parseLong(f[3]), Long.parseLong(f[4]), f[5].equals("per_record") ? 1 : 0});
                    case "r" -> {
                        FlinkReplay.Rec r = new FlinkReplay.Rec();
                        r.topic = Integer.parseInt(f[1]); // the spec
                        r.key = f[2] + "/" + f[5]; // scenario/key: scenarios never share a window
                        r.index = Integer.parseInt(f[3]);
                        r.pt = Long.parseLong(f[4]);
                        r.value = Double.parseDouble(f[6]);
                        records.add(r);
                    }
                    default -> throw new IllegalArgumentException(line);
                }
            }
        }
        long grid = 1;
        long lastEnd = 0;
        for (long[] s : specs) {
            long step = (s[2] > 0 ? s[2] : s[1]) * scale;
            grid = grid / gcd(grid, step) * step;
            lastEnd = Math.max(lastEnd, records.get(records.size() - 1).pt + s[1]);
        }
        FlinkReplay.Rec sentinel = new FlinkReplay.Rec(); // keeps the job alive past every window
        sentinel.index = -1;
        sentinel.topic = -1;
        sentinel.key = "";
        sentinel.pt = lastEnd + Math.max(1, 300 / scale);
        records.add(sentinel);

        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(1);
        env.setBufferTimeout(0);
        DataStream<FlinkReplay.Rec> paced = env.fromData(records, TypeInformation.of(FlinkReplay.Rec.class))
                .map(new Pace(scale, grid, records.get(0).pt));
        List<DataStream<String>> outputs = new ArrayList<>();
        for (long[] s : specs) {
            int id = (int) s[0];
            Duration size = Duration.ofMillis(s[1] * scale);
            Duration offset = Duration.ofMillis(s[3] * scale);
            WindowedStream<FlinkReplay.Rec, String, TimeWindow> windowed = paced.filter(r -> r.topic == id)
                    .keyBy(r -> r.key, Types.STRING)
                    .window(s[2] > 0
                            ? SlidingProcessingTimeWindows.of(size, Duration.ofMillis(s[2] * scale), offset)
                            : TumblingProcessingTimeWindows.of(size, offset));
            if (s[4] == 1) {
                windowed = windowed.trigger(CountTrigger.of(1));
            }
            outputs.add(windowed.aggregate(new Aggregate(), new Emit(id), TypeInformation.of(Acc.class),
                    TypeInformation.of(Acc.class), Types.STRING));
        }
        DataStream<String> all = outputs.get(0);
        if (outputs.size() > 1) {
            all = all.union(outputs.subList(1, outputs.size()).toArray(new DataStream[0]));
        }
        try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(Path.of(args[1])))) {
            out.println("scale " + scale);
            try (CloseableIterator<String> lines = all.executeAndCollect("processing-time conformance")) {
                lines.forEachRemaining(out::println);
            }
        }
    }

    private static long gcd(long a, long b) {
        return b == 0 ? a : gcd(b, a % b);
    }
}
