import java.io.PrintWriter;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.serialization.SerializerConfigImpl;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.SourceOutput;
import org.apache.flink.api.dag.Transformation;
import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.event.WatermarkEvent;
import org.apache.flink.runtime.metrics.groups.UnregisteredMetricGroups;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.operators.source.ProgressiveTimestampsAndWatermarks;
import org.apache.flink.streaming.api.operators.source.TimestampsAndWatermarks;
import org.apache.flink.streaming.api.transformations.OneInputTransformation;
import org.apache.flink.streaming.api.transformations.PartitionTransformation;
import org.apache.flink.streaming.api.transformations.UnionTransformation;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.io.PushingAsyncDataInput;
import org.apache.flink.streaming.runtime.streamrecord.LatencyMarker;
import org.apache.flink.streaming.runtime.streamrecord.RecordAttributes;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.TestProcessingTimeService;
import org.apache.flink.streaming.runtime.watermarkstatus.StatusWatermarkValve;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.streaming.util.KeyedOneInputStreamOperatorTestHarness;
import org.apache.flink.streaming.util.OneInputStreamOperatorTestHarness;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.Schema;
import org.apache.flink.table.api.Table;
import org.apache.flink.table.api.TableDescriptor;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.api.internal.TableEnvironmentImpl;
import org.apache.flink.table.connector.ChangelogMode;
import org.apache.flink.table.connector.ProviderContext;
import org.apache.flink.table.connector.source.DataStreamScanProvider;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.connector.source.LookupTableSource;
import org.apache.flink.table.connector.source.ScanTableSource;
import org.apache.flink.table.connector.source.lookup.LookupFunctionProvider;
import org.apache.flink.table.connector.source.abilities.SupportsWatermarkPushDown;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.data.TimestampData;
import org.apache.flink.table.factories.DynamicTableSourceFactory;
import org.apache.flink.table.functions.LookupFunction;
import org.apache.flink.table.operations.ModifyOperation;
import org.apache.flink.table.operations.Operation;
import org.apache.flink.streaming.api.operators.KeyedProcessOperator;
import org.apache.flink.metrics.Counter;
import org.apache.flink.table.runtime.operators.aggregate.GroupAggFunction;
import org.apache.flink.table.runtime.operators.window.tvf.common.WindowAggOperator;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.runtime.typeutils.RowDataSerializer;
import org.apache.flink.table.types.DataType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.util.clock.Clock;
import org.apache.flink.util.clock.ManualClock;

/**
 * Runs a Flink SQL script's aggregating INSERT (a window aggregation, an unbounded GROUP BY, or
 * an OVER aggregation ordered by event or processing time) through the operators Flink's own
 * planner builds for it, deterministically.
 *
 * <p>Real Flink: the planner (parser, optimizer, code generation) translates the script; each
 * Kafka table is read by a test connector that, like Kafka's, implements
 * {@link SupportsWatermarkPushDown}, so the planner hands it the watermark strategy it
 * generates from the WATERMARK clause, 'scan.watermark.*' options and
 * 'table.exec.source.idle-timeout'. That strategy runs in a
 * {@link ProgressiveTimestampsAndWatermarks} per table (what SourceOperator uses: a generator
 * per split, the multiplexer, periodic emission on a processing-time service, idleness), then
 * the one-input operators of the table's branch where a UNION ALL joins several tables, then a
 * {@link StatusWatermarkValve} with a channel per table (the network input of the operator
 * after the union), then every one-input operator of the translated graph between it and the
 * sink (the window aggregation and whatever the planner puts around it) in Flink's operator
 * test harnesses, keyed with the transformation's own key selector where it has one.
 * Ours: the loop feeding records in the given (processing time) order with the periodic ticks at
 * multiples of the interval, the state TTL's processing time set to each record's (and the
 * processing time of a bounded processing-time OVER or of a window aggregation over a PROCTIME()
 * column, its timers for an instant fired 1 ms later, before the records and ticks of that
 * millisecond, and every one left after the last record), and the log of what reaches the sink,
 * attributed to its cause.
 *
 * <p>Usage: {@code FlinkSqlReplay script1 feed1 out1 [script2 feed2 out2 ...]}. A feed is lines
 * {@code r table partition offset pt field1 field2 ...} (the table's physical columns, in
 * order; a TIMESTAMP as epoch ms; {@code null}), and for a lookup table ('jdbc', read by the
 * harness's lookup connector) its rows' versions, {@code v table time seq deleted field1 ...}.
 * The output: {@code columns name ...}, {@code over Function} for an OVER aggregation (the
 * function's class), then {@code rec i W dropped} per record (the window operator's watermark before it, and whether its late-records counter
 * counted it) and {@code fire cause time W kind field1 ...} per row reaching the sink ({@code
 * cause}: {@code r<i>}, record i or the watermark it emitted, {@code t}, a periodic tick, or
 * {@code c}, the processing-time timers of a bounded OVER or a window aggregation;
 * {@code kind}: the row's RowKind, +I, -U, +U or -D).
 */
public final class FlinkSqlReplay {

    // ---------------------------------------------------------------- the test connector

    /** The name of the connector's own (never run) stream: where the walk stops. */
    static final String SOURCE = "replay-source";

    /** Per table, the strategy the planner pushed into its source, and its physical row type. */
    static final Map<String, WatermarkStrategy<RowData>> pushed = new HashMap<>();
    static final Map<String, DataType> physicalRows = new HashMap<>();

    /**
     * A test connector's factory: the table's options (the production connector's) unchecked,
     * its physical row type kept for the feed; the source is the connector's, by table name.
     */
    abstract static class UncheckedOptionsFactory implements DynamicTableSourceFactory {
        @Override
        public Set<ConfigOption<?>> requiredOptions() {
            return new HashSet<>();
        }

        @Override
        public Set<ConfigOption<?>> optionalOptions() {
            return new HashSet<>();
        }

        @Override
        public DynamicTableSource createDynamicTableSource(Context context) {
            String table = context.getObjectIdentifier().getObjectName();
            physicalRows.put(table, context.getPhysicalRowDataType());
            return source(table);
        }

        abstract DynamicTableSource source(String table);
    }

    /** 'connector' = 'replay': what the harness puts in place of 'kafka'. */
    public static final class ReplayFactory extends UncheckedOptionsFactory {
        @Override
        public String factoryIdentifier() {
            return "replay";
        }

        @Override
        DynamicTableSource source(String table) {
            return new ReplaySource(table);
        }
    }

    /** A source that keeps the pushed-down watermark strategy; its own stream is never run. */
    static final class ReplaySource implements ScanTableSource, SupportsWatermarkPushDown {
        private final String table;

        ReplaySource(String table) {
            this.table = table;
        }

        @Override
        public ChangelogMode getChangelogMode() {
            return ChangelogMode.insertOnly();
        }

        @Override
        public ScanRuntimeProvider getScanRuntimeProvider(ScanContext context) {
            InternalTypeInfo<RowData> type = InternalTypeInfo.of((RowType) physicalRows.get(table).getLogicalType());
            return new DataStreamScanProvider() {
                @Override
                public DataStream<RowData> produceDataStream(ProviderContext provider, StreamExecutionEnvironment env) {
                    return env.fromSequence(0, 0).map(x -> (RowData) null).returns(type).name(SOURCE + " " + table);
                }

                @Override
                public boolean isBounded() {
                    return false;
                }
            };
        }

        @Override
        public void applyWatermark(WatermarkStrategy<RowData> strategy) {
            pushed.put(table, strategy);
        }

        @Override
        public DynamicTableSource copy() {
            return new ReplaySource(table);
        }

        @Override
        public String asSummaryString() {
            return "replay";
        }
    }

    // ---------------------------------------------------------------- the lookup connector

    /** A version of a lookup table's row: from processing time {@code at} (then {@code seq})
     * on, the row of its key, or no row ({@code deleted}). */
    record Version(long at, long seq, boolean deleted, GenericRowData row) {}

    /** Per lookup table, its rows' versions, in the feed's order. */
    static final Map<String, List<Version>> versions = new HashMap<>();
    /** The processing time of the record being processed: what a lookup reads the table as of
     * (the database as it is when the lookup join runs for that record). */
    static long lookupNow = Long.MIN_VALUE;

    /**
     * 'connector' = 'replay-lookup': what the harness puts in place of a lookup table's
     * connector. A lookup returns the row of each key (the key columns the join's ON compares)
     * whose latest version at or before {@link #lookupNow} (largest time, then sequence) is not
     * a delete: a database read at that instant, with no cache.
     */
    public static final class ReplayLookupFactory extends UncheckedOptionsFactory {
        @Override
        public String factoryIdentifier() {
            return "replay-lookup";
        }

        @Override
        DynamicTableSource source(String table) {
            return new ReplayLookupSource(table);
        }
    }

    static final class ReplayLookupSource implements LookupTableSource {
        private final String table;

        ReplayLookupSource(String table) {
            this.table = table;
        }

        @Override
        public LookupRuntimeProvider getLookupRuntimeProvider(LookupContext context) {
            List<LogicalType> columns = ((RowType) physicalRows.get(table).getLogicalType()).getChildren();
            List<Integer> keys = new ArrayList<>();
            for (int[] path : context.getKeys()) {
                if (path.length != 1) {
                    throw new IllegalArgumentException("a nested lookup key");
                }
                keys.add(path[0]);
            }
            return LookupFunctionProvider.of(new ReplayLookup(table, keys, columns));
        }

        @Override
        public DynamicTableSource copy() {
            return new ReplayLookupSource(table);
        }

        @Override
        public String asSummaryString() {
            return "replay-lookup";
        }
    }

    public static final class ReplayLookup extends LookupFunction {
        private final String table;
        private final List<Integer> keys;
        private final List<RowData.FieldGetter> keyGetters = new ArrayList<>();
        private final List<RowData.FieldGetter> rowGetters = new ArrayList<>();

        ReplayLookup(String table, List<Integer> keys, List<LogicalType> columns) {
            this.table = table;
            this.keys = keys;
            for (int i = 0; i < keys.size(); i++) {
                keyGetters.add(RowData.createFieldGetter(columns.get(keys.get(i)), i));
                rowGetters.add(RowData.createFieldGetter(columns.get(keys.get(i)), keys.get(i)));
            }
        }

        @Override
        public Collection<RowData> lookup(RowData keyRow) {
            Map<List<Object>, Version> latest = new LinkedHashMap<>();
            List<Object> wanted = new ArrayList<>();
            for (RowData.FieldGetter g : keyGetters) {
                wanted.add(g.getFieldOrNull(keyRow));
            }
            for (Version v : versions.getOrDefault(table, List.of())) {
                List<Object> key = new ArrayList<>();
                for (RowData.FieldGetter g : rowGetters) {
                    key.add(g.getFieldOrNull(v.row()));
                }
                if (!key.equals(wanted) || v.at() > lookupNow) {
                    continue;
                }
                Version before = latest.get(key);
                if (before == null || v.at() > before.at() || v.at() == before.at() && v.seq() > before.seq()) {
                    latest.put(key, v);
                }
            }
            List<RowData> rows = new ArrayList<>();
            for (Version v : latest.values()) {
                if (!v.deleted()) {
                    rows.add(v.row());
                }
            }
            return rows;
        }
    }

    // ---------------------------------------------------------------- the translated graph

    private static final Pattern SET = Pattern.compile("(?is)^SET\\s+'([^']+)'\\s*=\\s*'([^']*)'$");
    private static final Pattern INSERT = Pattern.compile("(?is)^INSERT\\s+INTO\\s+(\\S+)\\s+(SELECT\\b.*)$");

    private final List<OneInputStreamOperatorTestHarness<RowData, RowData>> stages = new ArrayList<>();
    /** Per table, the one-input operators between its source and the UNION ALL (none without
     * one), and its channel of the valve after them. */
    private final Map<String, List<OneInputStreamOperatorTestHarness<RowData, RowData>>> branches =
            new LinkedHashMap<>();
    private final Map<String, Integer> channels = new HashMap<>();
    /** Per stage, the serializer of a keyed stage's input (null: not keyed): a keyed stage
     * reads its rows from the network, as binary rows (the OVER function reads the rowtime of
     * one with {@code getLong}, which only a binary row answers for a TIMESTAMP). */
    private final List<RowDataSerializer> networkInputs = new ArrayList<>();
    private final PrintWriter out;
    private long interval;
    private int windowStage = -1; // the window, group or OVER aggregation
    private Counter overLate; // the OVER function's late-records counter, if that is the stage
    /** The stage of a bounded processing-time OVER function or a processing-time window
     * aggregation (-1: none): the one stage whose processing time the replay drives, since it
     * writes on processing-time timers. */
    private int procStage = -1;
    private long windowWatermark = Long.MIN_VALUE;
    private List<RowData.FieldGetter> getters;
    private List<LogicalType> outputTypes;

    private FlinkSqlReplay(String script, PrintWriter out) throws Exception {
        this.out = out;
        pushed.clear();
        physicalRows.clear();
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(1);
        StreamTableEnvironment tEnv = StreamTableEnvironment.create(env, EnvironmentSettings.inStreamingMode());
        // One aggregation phase: at parallelism 1 the local pre-aggregation of TWO_PHASE only
        // buffers until the next watermark and forwards it after flushing, so it moves no
        // firing; one operator is simpler to drive and to read.
        tEnv.getConfig().set("table.optimizer.agg-phase-strategy", "ONE_PHASE");
        String insert = null;
        String target = null;
        String select = null;
        for (String raw : script.split(";")) {
            String statement = raw.strip();
            if (statement.isEmpty()) {
                continue;
            }
            Matcher set = SET.matcher(statement);
            Matcher into = INSERT.matcher(statement);
            if (set.matches()) {
                tEnv.getConfig().getConfiguration().setString(set.group(1), set.group(2));
            } else if (into.matches()) {
                insert = statement;
                target = into.group(1);
                select = into.group(2);
            } else {
                tEnv.executeSql(statement
                        .replaceAll("'connector'\\s*=\\s*'kafka'", "'connector' = 'replay'")
                        .replaceAll("'connector'\\s*=\\s*'jdbc'", "'connector' = 'replay-lookup'"));
            }
        }
        if (insert == null) {
            throw new IllegalArgumentException("no INSERT in the script");
        }
        Table query = tEnv.sqlQuery(select);
        tEnv.createTemporaryTable(target, TableDescriptor.forConnector("blackhole")
                .schema(Schema.newBuilder().fromResolvedSchema(query.getResolvedSchema()).build())
                .build());
        out.println("columns " + String.join(" ", query.getResolvedSchema().getColumnNames()));
        TableEnvironmentImpl impl = (TableEnvironmentImpl) tEnv;
        List<ModifyOperation> modify = new ArrayList<>();
        for (Operation operation : impl.getParser().parse(insert)) {
            modify.add((ModifyOperation) operation);
        }
        List<Transformation<?>> translated = impl.getPlanner().translate(modify);
        if (translated.size() != 1) {
            throw new IllegalStateException("expected one sink, got " + translated);
        }
        interval = tEnv.getConfig().get(PipelineOptions.AUTO_WATERMARK_INTERVAL).toMillis();
        buildStages(translated.get(0));
    }

    /** The one-input operators between the source and the sink, source side first. */
    @SuppressWarnings({"unchecked", "rawtypes"})
    private void buildStages(Transformation<?> sink) throws Exception {
        List<OneInputTransformation<RowData, RowData>> chain = new ArrayList<>();
        Transformation<?> t = walk(sink.getInputs().get(0), chain); // the sink writes nowhere we read
        SerializerConfigImpl config = new SerializerConfigImpl();
        List<Transformation<?>> sources = t instanceof UnionTransformation<?> u ? u.getInputs() : List.of(t);
        for (Transformation<?> input : sources) {
            List<OneInputTransformation<RowData, RowData>> branch = new ArrayList<>();
            Transformation<?> source = input == t ? t : walk(input, branch);
            if (!source.getName().startsWith(SOURCE + " ")) {
                throw new IllegalStateException("a UNION ALL input not read from a table: " + source);
            }
            String table = source.getName().substring(SOURCE.length() + 1);
            List<OneInputStreamOperatorTestHarness<RowData, RowData>> operators = new ArrayList<>();
            for (OneInputTransformation<RowData, RowData> one : branch) {
                if (one.getStateKeySelector() != null) {
                    throw new IllegalStateException("a keyed operator before the UNION ALL: " + one);
                }
                OneInputStreamOperatorTestHarness<RowData, RowData> harness =
                        new OneInputStreamOperatorTestHarness<>(one.getOperatorFactory(), 1, 1, 0);
                harness.setup(one.getOutputType().createSerializer(config));
                harness.open();
                operators.add(harness);
            }
            channels.put(table, branches.size());
            branches.put(table, operators);
        }
        for (OneInputTransformation<RowData, RowData> one : chain) {
            TypeSerializer<RowData> in = one.getInputType().createSerializer(config);
            OneInputStreamOperatorTestHarness<RowData, RowData> harness = one.getStateKeySelector() != null
                    ? new KeyedOneInputStreamOperatorTestHarness<>(
                            one.getOperatorFactory(), (org.apache.flink.api.java.functions.KeySelector) one.getStateKeySelector(),
                            (org.apache.flink.api.common.typeinfo.TypeInformation) one.getStateKeyType(), in)
                    : new OneInputStreamOperatorTestHarness<>(one.getOperatorFactory(), 1, 1, 0);
            harness.setup(one.getOutputType().createSerializer(config));
            harness.open();
            if (harness.getOperator() instanceof WindowAggOperator<?, ?>
                    || harness.getOperator() instanceof KeyedProcessOperator<?, ?, ?> p
                            && p.getUserFunction() instanceof GroupAggFunction) {
                windowStage = stages.size();
            }
            if (harness.getOperator() instanceof WindowAggOperator<?, ?> w && !isEventTime(w)) {
                // A window TVF over a PROCTIME() column: its records are placed by the stage's
                // processing time, and its windows fired by processing-time timers.
                procStage = stages.size();
            }
            if (harness.getOperator() instanceof KeyedProcessOperator<?, ?, ?> p
                    && p.getUserFunction().getClass().getPackageName().equals(OVER_PACKAGE)) {
                // An event-time OVER function: RowTimeRangeBoundedPrecedingFunction,
                // RowTimeRowsBoundedPrecedingFunction or RowTimeUnboundedPrecedingOverFunctionV2
                // (the harness checks which one the planner chose for the frame); or
                // ProcTimeUnboundedPrecedingFunction, which drops nothing; or a bounded frame
                // ordered by processing time, ProcTimeRangeBoundedPrecedingFunction (a row
                // written on a timer for the millisecond after it was read) or
                // ProcTimeRowsBoundedPrecedingFunction (a state-cleanup timer), neither
                // dropping anything either.
                Object over = p.getUserFunction();
                windowStage = stages.size();
                String name = over.getClass().getSimpleName();
                if (!name.startsWith("ProcTime")) {
                    overLate = lateCounter(over);
                } else if (PROC_TIMED.contains(name)) {
                    procStage = stages.size();
                }
                out.println("over " + over.getClass().getSimpleName());
            }
            stages.add(harness);
            networkInputs.add(one.getStateKeySelector() != null ? (RowDataSerializer) in : null);
        }
        if (windowStage < 0) {
            throw new IllegalStateException("no window, group or OVER aggregation among " + chain);
        }
        RowType output = (RowType) ((InternalTypeInfo<RowData>) chain.get(chain.size() - 1).getOutputType()).toLogicalType();
        outputTypes = output.getChildren();
        getters = new ArrayList<>();
        for (int i = 0; i < outputTypes.size(); i++) {
            getters.add(RowData.createFieldGetter(outputTypes.get(i), i));
        }
    }

    /**
     * The one-input operators from {@code t} towards the sources into {@code chain}, source side
     * first, up to a table's source or a UNION ALL: returned.
     */
    @SuppressWarnings("unchecked")
    private static Transformation<?> walk(Transformation<?> t, List<OneInputTransformation<RowData, RowData>> chain) {
        while (!t.getName().startsWith(SOURCE + " ") && !(t instanceof UnionTransformation<?>)) {
            if (t instanceof OneInputTransformation<?, ?> one) {
                chain.add((OneInputTransformation<RowData, RowData>) one);
            } else if (!(t instanceof PartitionTransformation<?>)) {
                throw new IllegalStateException("unexpected transformation " + t);
            }
            if (t.getInputs().size() != 1) {
                throw new IllegalStateException("not a chain: " + t);
            }
            t = t.getInputs().get(0);
        }
        Collections.reverse(chain);
        return t;
    }

    /** Whether a window aggregation runs in event time (its private {@code isEventTime}). */
    private static boolean isEventTime(WindowAggOperator<?, ?> operator) throws Exception {
        Field eventTime = WindowAggOperator.class.getDeclaredField("isEventTime");
        eventTime.setAccessible(true);
        return eventTime.getBoolean(operator);
    }

    /** The package of Flink's OVER functions. */
    private static final String OVER_PACKAGE = "org.apache.flink.table.runtime.operators.over";
    /** The OVER functions that act on processing-time timers. */
    private static final Set<String> PROC_TIMED =
            Set.of("ProcTimeRangeBoundedPrecedingFunction", "ProcTimeRowsBoundedPrecedingFunction");

    /**
     * An OVER function's late-records counter, {@code numLateRecordsDropped}: private in each
     * function (the getter is protected, for Flink's own tests), read by reflection from the
     * class that declares it.
     */
    private static Counter lateCounter(Object function) throws Exception {
        for (Class<?> c = function.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Field late = c.getDeclaredField("numLateRecordsDropped");
                late.setAccessible(true);
                Counter counter = (Counter) late.get(function);
                if (counter == null) {
                    throw new IllegalStateException(c + ".numLateRecordsDropped not opened");
                }
                return counter;
            } catch (NoSuchFieldException e) {
                // declared further up, if anywhere
            }
        }
        throw new IllegalStateException("no numLateRecordsDropped in " + function.getClass());
    }

    private long lateDropped() {
        if (overLate != null) {
            return overLate.getCount();
        }
        return stages.get(windowStage).getOperator() instanceof WindowAggOperator<?, ?> w
                ? w.getNumLateRecordsDropped().getCount()
                : 0; // a group aggregation drops nothing
    }

    /** Push one element into stage {@code i} and everything it emits down the chain. */
    private void push(int i, Object element, List<RowData> sunk) throws Exception {
        if (i == stages.size()) {
            if (element instanceof StreamRecord<?> r) {
                sunk.add((RowData) r.getValue());
            }
            return;
        }
        OneInputStreamOperatorTestHarness<RowData, RowData> h = stages.get(i);
        RowDataSerializer network = networkInputs.get(i);
        if (element instanceof StreamRecord<?> r && network != null) {
            @SuppressWarnings("unchecked")
            RowData row = ((StreamRecord<RowData>) r).getValue();
            element = new StreamRecord<>(network.toBinaryRow(row).copy(), r.getTimestamp());
        } else if (element instanceof Watermark w && i == windowStage) {
            windowWatermark = w.getTimestamp();
        }
        if (feed(h, element)) {
            Object o;
            while ((o = h.getOutput().poll()) != null) {
                push(i + 1, o, sunk);
            }
        }
    }

    /** Feed a record, watermark or watermark status into {@code h}; false for anything else. */
    @SuppressWarnings("unchecked")
    private static boolean feed(OneInputStreamOperatorTestHarness<RowData, RowData> h, Object element)
            throws Exception {
        if (element instanceof StreamRecord<?> r) {
            h.processElement((StreamRecord<RowData>) r);
        } else if (element instanceof Watermark w) {
            h.processWatermark(w);
        } else if (element instanceof WatermarkStatus s) {
            h.processWatermarkStatus(s);
        } else {
            return false;
        }
        return true;
    }

    /**
     * Push one element of {@code table}'s source into stage {@code i} of its branch and what it
     * emits on: after the branch, a record into the chain, a watermark or status into the
     * table's channel of the valve.
     */
    private void pushBranch(String table, int i, Object element) throws Exception {
        List<OneInputStreamOperatorTestHarness<RowData, RowData>> branch = branches.get(table);
        if (i == branch.size()) {
            int channel = channels.get(table);
            if (element instanceof StreamRecord<?>) {
                push(0, element, fired);
            } else if (element instanceof Watermark w) {
                valve.inputWatermark(w, channel, afterValve);
            } else if (element instanceof WatermarkStatus s) {
                valve.inputWatermarkStatus(s, channel, afterValve);
            }
            return;
        }
        OneInputStreamOperatorTestHarness<RowData, RowData> h = branch.get(i);
        if (feed(h, element)) {
            Object o;
            while ((o = h.getOutput().poll()) != null) {
                pushBranch(table, i + 1, o);
            }
        }
    }

    // ---------------------------------------------------------------- the source and the feed

    private final List<RowData> fired = new ArrayList<>();

    /** The valve of the operator after the sources (or the UNION ALL): a channel per table. */
    private StatusWatermarkValve valve;
    private final PushingAsyncDataInput.DataOutput<RowData> afterValve = new PushingAsyncDataInput.DataOutput<>() {
        @Override
        public void emitRecord(StreamRecord<RowData> r) {
            throw new IllegalStateException("records do not pass the valve");
        }

        @Override
        public void emitWatermark(Watermark w) throws Exception {
            push(0, w, fired);
        }

        @Override
        public void emitWatermarkStatus(WatermarkStatus s) throws Exception {
            push(0, s, fired);
        }

        @Override
        public void emitLatencyMarker(LatencyMarker m) {}

        @Override
        public void emitRecordAttributes(RecordAttributes a) {}

        @Override
        public void emitWatermark(WatermarkEvent e) {}
    };

    /** A table's source's records and watermarks: into its branch. */
    private final class SourceChannel implements PushingAsyncDataInput.DataOutput<RowData> {
        private final String table;

        SourceChannel(String table) {
            this.table = table;
        }

        @Override
        public void emitRecord(StreamRecord<RowData> r) throws Exception {
            pushBranch(table, 0, r);
        }

        @Override
        public void emitWatermark(Watermark w) throws Exception {
            pushBranch(table, 0, w);
        }

        @Override
        public void emitWatermarkStatus(WatermarkStatus s) throws Exception {
            pushBranch(table, 0, s);
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

    private String render(RowData row) {
        StringBuilder s = new StringBuilder();
        for (int i = 0; i < getters.size(); i++) {
            Object v = getters.get(i).getFieldOrNull(row);
            s.append(' ');
            if (v instanceof TimestampData t) {
                s.append(t.getMillisecond());
            } else {
                s.append(v);
            }
        }
        return s.toString();
    }

    private void drain(String cause, long time) {
        for (RowData row : fired) {
            out.println("fire " + cause + " " + time + " " + windowWatermark + " "
                    + row.getRowKind().shortString() + render(row));
        }
        fired.clear();
    }

    /**
     * Fire the processing-time stage's timers for instants before {@code until},
     * earliest first, one instant at a time, each instant's rows pushed down the chain and
     * logged with cause {@code c} 1 ms after it: Flink fires a processing-time timer for
     * {@code t} at {@code t + 1} at the earliest ({@code
     * ProcessingTimeServiceUtil.getProcessingTimeDelay}), after the records of {@code t}. Then
     * the stage's clock is set to {@code until} without firing the timers for {@code until}
     * (unless {@code until} is {@link Long#MAX_VALUE}: every timer left fired, the job running
     * on). The timer service schedules only its earliest timer, and a deleted timer's callback
     * stays scheduled (firing with nothing due): hence the loop until none is left before
     * {@code until}.
     */
    private void fireProcTimers(long until) throws Exception {
        if (procStage < 0) {
            return;
        }
        OneInputStreamOperatorTestHarness<RowData, RowData> h = stages.get(procStage);
        while (true) {
            long next = Long.MAX_VALUE;
            for (long t : h.getProcessingTimeService().getActiveTimerTimestamps()) {
                next = Math.min(next, t);
            }
            if (next >= until) {
                break;
            }
            h.setProcessingTime(next);
            Object o;
            while ((o = h.getOutput().poll()) != null) {
                push(procStage + 1, o, fired);
            }
            drain("c", next + 1);
        }
        if (until != Long.MAX_VALUE) {
            // TestProcessingTimeService.setCurrentTime would fire the timers for until too.
            Clock clock = h.getProcessingTimeService().getClock();
            Method set = clock.getClass().getMethod("setCurrentTime", long.class, TimeUnit.class);
            set.setAccessible(true); // a method of a class private to the test service
            set.invoke(clock, until, TimeUnit.MILLISECONDS);
        }
    }

    private static Object field(LogicalType type, String text) {
        if (text.equals("null")) {
            return null;
        }
        return switch (type.getTypeRoot()) {
            case CHAR, VARCHAR -> StringData.fromString(text);
            case DOUBLE -> Double.parseDouble(text);
            case BIGINT -> Long.parseLong(text);
            case INTEGER -> Integer.parseInt(text);
            case TIMESTAMP_WITHOUT_TIME_ZONE -> TimestampData.fromEpochMillis(Long.parseLong(text));
            default -> throw new IllegalArgumentException("column type " + type);
        };
    }

    private void run(List<String> feed) throws Exception {
        List<String> tables = new ArrayList<>(); // per record
        List<long[]> meta = new ArrayList<>(); // (partition, offset, pt)
        List<RowData> rows = new ArrayList<>();
        versions.clear();
        for (String line : feed) {
            String[] f = line.strip().split(" ");
            if (f[0].equals("v")) { // v table at seq deleted field1 ...: a lookup table's version
                List<LogicalType> columns = ((RowType) physicalRows.get(f[1]).getLogicalType()).getChildren();
                GenericRowData row = new GenericRowData(columns.size());
                for (int c = 0; c < columns.size(); c++) {
                    row.setField(c, field(columns.get(c), f[5 + c]));
                }
                versions.computeIfAbsent(f[1], t -> new ArrayList<>())
                        .add(new Version(Long.parseLong(f[2]), Long.parseLong(f[3]), f[4].equals("1"), row));
                continue;
            }
            if (!f[0].equals("r")) {
                continue;
            }
            if (!branches.containsKey(f[1])) {
                throw new IllegalArgumentException("a record of " + f[1] + ", a table the INSERT does not read");
            }
            List<LogicalType> columns = ((RowType) physicalRows.get(f[1]).getLogicalType()).getChildren();
            tables.add(f[1]);
            meta.add(new long[] {Long.parseLong(f[2]), Long.parseLong(f[3]), Long.parseLong(f[4])});
            GenericRowData row = new GenericRowData(columns.size());
            for (int c = 0; c < columns.size(); c++) {
                row.setField(c, field(columns.get(c), f[5 + c]));
            }
            rows.add(row);
        }
        if (interval <= 0) {
            throw new IllegalStateException("pipeline.auto-watermark-interval must be > 0 here");
        }
        valve = new StatusWatermarkValve(branches.size());
        // The idleness clock: ms of processing time, shifted by a day because IdlenessTimer
        // reads a relative time of 0 as "no inactivity timer started".
        ManualClock clock = new ManualClock(Duration.ofDays(1).toNanos());
        long first = meta.get(0)[2];
        // The job starts with its first record: the first periodic tick is the first multiple
        // of the interval at or after it (the DataStream harness's and the plugin's convention).
        long tick = Math.floorDiv(first + interval - 1, interval) * interval;
        long now = tick - interval;
        clock.advanceTime(Duration.ofMillis(now));
        // A source per table, each ticking on its own processing-time service, in the order
        // the UNION ALL reads the tables.
        List<TestProcessingTimeService> sourceTimes = new ArrayList<>();
        List<ProgressiveTimestampsAndWatermarks<RowData>> sources = new ArrayList<>();
        Map<String, ReaderOutput<RowData>> readers = new HashMap<>();
        for (String table : branches.keySet()) {
            TestProcessingTimeService sourceTime = new TestProcessingTimeService();
            sourceTime.setCurrentTime(now);
            ProgressiveTimestampsAndWatermarks<RowData> source = new ProgressiveTimestampsAndWatermarks<>(
                    (row, previous) -> previous, // Kafka's record timestamp; SQL windows read the row's column
                    pushed.getOrDefault(table, WatermarkStrategy.noWatermarks()), // no WATERMARK clause
                    new TimestampsAndWatermarks.TimestampsAndWatermarksContextProvider(new UnregisteredMetricsGroup()),
                    sourceTime,
                    Duration.ofMillis(interval),
                    clock,
                    clock,
                    UnregisteredMetricGroups.createUnregisteredTaskMetricGroup().getIOMetricGroup());
            readers.put(table, source.createMainOutput(new SourceChannel(table), NO_LISTENER));
            sourceTimes.add(sourceTime);
            sources.add(source);
        }
        Map<String, SourceOutput<RowData>> splits = new LinkedHashMap<>();
        for (int i = 0; i < meta.size(); i++) { // every partition assigned at the start, before any record
            String table = tables.get(i);
            splits.computeIfAbsent(table + " " + meta.get(i)[0], p -> readers.get(table).createOutputForSplit(p));
        }
        for (ProgressiveTimestampsAndWatermarks<RowData> source : sources) {
            source.startPeriodicWatermarkEmits();
        }

        long last = meta.get(meta.size() - 1)[2];
        // The archive's horizon: ticks up to the first one at or after the last record.
        long horizon = Math.floorDiv(last + interval - 1, interval) * interval;
        for (int i = 0; i < rows.size(); i++) {
            long pt = meta.get(i)[2];
            while (tick < pt) { // a record and a tick at the same ms: the record first
                fireProcTimers(tick);
                clock.advanceTime(Duration.ofMillis(tick - now));
                now = tick;
                for (TestProcessingTimeService sourceTime : sourceTimes) {
                    sourceTime.setCurrentTime(tick);
                }
                drain("t", tick);
                tick += interval;
            }
            clock.advanceTime(Duration.ofMillis(pt - now));
            now = pt;
            fireProcTimers(pt); // timers for instants before pt fire before its records
            for (OneInputStreamOperatorTestHarness<RowData, RowData> s : stages) {
                s.setStateTtlProcessingTime(pt); // table.exec.state.ttl is processing time
            }
            long before = windowWatermark;
            long dropped = lateDropped();
            lookupNow = pt;
            splits.get(tables.get(i) + " " + meta.get(i)[0]).collect(rows.get(i), pt);
            out.println("rec " + i + " " + before + " " + (lateDropped() - dropped));
            drain("r" + i, pt);
        }
        while (tick <= horizon) {
            fireProcTimers(tick);
            clock.advanceTime(Duration.ofMillis(tick - now));
            now = tick;
            for (TestProcessingTimeService sourceTime : sourceTimes) {
                sourceTime.setCurrentTime(tick);
            }
            drain("t", tick);
            tick += interval;
        }
        fireProcTimers(Long.MAX_VALUE); // the job runs on: its last rows are written
        for (List<OneInputStreamOperatorTestHarness<RowData, RowData>> branch : branches.values()) {
            for (OneInputStreamOperatorTestHarness<RowData, RowData> s : branch) {
                s.close();
            }
        }
        for (OneInputStreamOperatorTestHarness<RowData, RowData> s : stages) {
            s.close();
        }
    }

    public static void main(String[] args) throws Exception {
        for (int i = 0; i + 2 < args.length; i += 3) {
            try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(Path.of(args[i + 2])))) {
                FlinkSqlReplay replay = new FlinkSqlReplay(Files.readString(Path.of(args[i])), out);
                replay.run(Files.readAllLines(Path.of(args[i + 1])));
            }
        }
    }
}
