// relay-harness: the relay as processes, for benchmarks, the soak and crash trials.
//
//   relay-harness bench [--events N] [--users U] [--devices-per-user D] [--partitions P] [--connections C]
//                       [--max-in-flight M] [--max-streams S] [--http2-client nio|nghttp2] [--perf SECONDS] [--skip-h2load]
//                       [--relay-kafka-property KEY=VALUE ...] [--trace-headers] [--otlp] [--work DIR]
//                       (--trace-headers: every event carries W3C traceparent and tracestate headers;
//                        --otlp: the relay exports its spans (tracing.otlp_endpoint) to a collector stand-in;
//                        --sampled-percent P: that share of the traceparents carry the sampled flag, the rest not)
//   relay-harness restore [--users U] [--devices D] [--partitions P] [--work DIR]
//   relay-harness soak [--rate R] [--minutes M] [--users U] [--devices-per-user D] [--partitions P] [--connections C]
//                      [--max-in-flight M] [--sample-s S] [--drain-s S] [--producer-linger-ms L]
//                      [--broker mock|noida] [--relay-kafka-property KEY=VALUE ...] [--work DIR]   (writes DIR/soak.csv)
//   relay-harness mixed [--scenario flood|hot|both] [--apns-latency-ms MS] [--partitions P] [--max-in-flight M]
//                       [--alert-users N] [--bulk-users N] [--bulk-events N] [--other-users N] [--hot-devices N] [--hot-events N]
//                       [--relay-kafka-property KEY=VALUE ...] [--work DIR]
//   relay-harness chaos [--trials N] [--users U] [--events-per-trial E] [--broker-down-s S] [--goaway-storm-s S]
//                       [--server-error-s S] [--work DIR]
//   relay-harness cluster [--partitions P] [--brokers B] [--results-partitions R] [--devices-partitions D]   (prints "READY <bootstrap>"; stdin lines
//                                                          "down N" / "up N" control broker N; EOF stops)
//   relay-harness simulator [--cert-dir DIR] [--jwt-public-key FILE] [--dead-tokens FILE] [--device-log FILE]
//                           [--goaway-every N] [--fail-every N] [--reset-every N] [--latency-ms MS]
//                                                          (prints "READY <port>"; stdin lines "slow MS COUNT",
//                                                          "goaway-storm S", "5xx S" add spells; EOF stops)
import Foundation

let arguments = Array(CommandLine.arguments.dropFirst())
switch arguments.first {
case "cluster": try runCluster(Array(arguments.dropFirst()))
case "simulator": try await runFaultySimulator(Array(arguments.dropFirst()))
case "chaos": try await runChaos(Array(arguments.dropFirst()))
case "bench": try await runBench(Array(arguments.dropFirst()))
case "restore": try await runRestore(Array(arguments.dropFirst()))
case "soak": try await runSoak(Array(arguments.dropFirst()))
case "mixed": try await runMixed(Array(arguments.dropFirst()))
default:
    print("usage: relay-harness bench|soak|mixed|chaos|cluster|simulator [options] (see Benchmarks/relay-harness/main.swift)")
    exit(64)
}
