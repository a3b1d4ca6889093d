// swift-tools-version: 6.2
import PackageDescription

let strictSwift: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

/// libFuzzer targets, one line each: the sources in `Tests/Fuzz/<name>/`, the seed corpus in
/// `Tests/Fuzz/Corpus/<name>/`. `make fuzz` runs them; the CLI tests replay every corpus file.
let fuzzTargets: [(name: String, dependencies: [Target.Dependency])] = [
    ("EventDecoderFuzz", ["APNs", "Relay"]),
    ("APNsResponseFuzz", ["APNs"]),
    ("BinaryErrorResponseFuzz", ["APNs", .product(name: "NIOCore", package: "swift-nio")]),
    ("FeedbackDecoderFuzz", ["APNs", .product(name: "NIOCore", package: "swift-nio")]),
]

let package = Package(
    name: "apns-relay",
    platforms: [.macOS(.v15)],
    // One product, the service. Its modules are the rooms of one program, not a published library:
    // no library products, so their names (`Kafka` is also swift-kafka-client's module) never meet a
    // user's, and the state machines are `package`.
    products: [
        .executable(name: "apns-relay", targets: ["apns-relay"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-configuration", from: "1.4.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        .package(url: "https://github.com/swift-otel/swift-w3c-trace-context", from: "1.0.0"),
        // Spans over OTLP/HTTP only: the gRPC exporter's trait would add grpc-swift to every build.
        .package(url: "https://github.com/swift-otel/swift-otel", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        // librdkafka through pkg-config; module map + shim header only.
        .systemLibrary(
            name: "CRdKafka",
            pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]
        ),
        // libnghttp2 through pkg-config; module map + shim header only.
        .systemLibrary(
            name: "CNGHTTP2",
            pkgConfig: "libnghttp2",
            providers: [.apt(["libnghttp2-dev"])]
        ),
        // jemalloc as apns-relay's heap (options.c: its settings; the header: mallctl to read them back).
        // SIGTERM/SIGINT held from before `main` until the relay's service group reads them (a constructor).
        .target(name: "CStopSignals"),
        .target(
            name: "CJemalloc",
            linkerSettings: [.linkedLibrary("jemalloc")]
        ),
        // Kafka's records as values (topic-partitions, consumed messages, records to produce, delivery reports),
        // linking nothing: the relay's engine needs them without librdkafka.
        .target(
            name: "KafkaCore",
            swiftSettings: strictSwift
        ),
        // The Swift face of librdkafka: consumer, producer, admin, embedded mock cluster.
        .target(
            name: "Kafka",
            dependencies: [
                "KafkaCore",
                "CRdKafka",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSwift
        ),
        // The transport-free APNs model: notifications, push types, tokens, environments, endpoints, outcomes
        // and their reasons, the retry table, Apple's payload rules. No NIO: the relay's domain needs it alone.
        .target(
            name: "APNsCore",
            swiftSettings: strictSwift
        ),
        // APNs wire: JWT, HTTP/2 and binary connections, the supervisor (over the APNsCore model).
        .target(
            name: "APNs",
            dependencies: [
                "APNsCore",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: strictSwift
        ),
        // An APNs HTTP/2 connection on nghttp2 (TLS still NIOSSL, through the bootstrap it shares with
        // swift-nio-http2's client in `APNs`), behind the same connection protocol: the relay's default client
        // (`apns.http2_client`).
        .target(
            name: "APNsNGHTTP2",
            dependencies: [
                "APNs",
                "CNGHTTP2",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSwift
        ),
        // The APNs simulator used by tests, the demo and benchmarks.
        .target(
            name: "APNsSimulator",
            dependencies: [
                "APNs",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSwift
        ),
        // The relay's pure core: the domain (decoding, badges, dispatch, offsets, registry) and the engine that decides
        // every step as values in, effects out. No I/O, no clock of its own: it links nothing that does (no NIO, no
        // librdkafka), which the compiler holds it to.
        .target(
            name: "RelayCore",
            dependencies: [
                "KafkaCore",
                "APNsCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
            ],
            swiftSettings: strictSwift
        ),
        // The service that performs the core's effects: the driver loop, Kafka and APNs clients, spans, metrics.
        .target(
            name: "Relay",
            dependencies: [
                "RelayCore",
                "KafkaCore",
                "Kafka",
                "APNsCore",
                "APNs",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
            ],
            swiftSettings: strictSwift
        ),
        // The CLI: run, demo, simulator, check-config, feedback.
        .executableTarget(
            name: "apns-relay",
            dependencies: [
                "CJemalloc",
                "CStopSignals",
                "Kafka",
                "APNs",
                "APNsNGHTTP2",
                "APNsSimulator",
                "Relay",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "OTel", package: "swift-otel"),
            ],
            swiftSettings: strictSwift
        ),

        // Benchmarks (executables, run by `make bench`; figures in docs/BENCHMARKS.md).
        .target(
            name: "CRdKafkaBaseline",
            dependencies: ["CRdKafka"],
            path: "Benchmarks/CRdKafkaBaseline"
        ),
        .executableTarget(
            name: "kafka-bench",
            dependencies: ["Kafka", "CRdKafka", "CRdKafkaBaseline"],
            path: "Benchmarks/kafka-bench",
            swiftSettings: strictSwift
        ),

        .executableTarget(
            name: "apns-bench",
            dependencies: [
                "APNs",
                "APNsNGHTTP2",
                "APNsSimulator",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/apns-bench",
            swiftSettings: strictSwift
        ),
        .executableTarget(
            name: "relay-harness",
            dependencies: [
                "Kafka",
                "APNs",
                "APNsSimulator",
                "TestSupport",
                "KafkaBrokerFront",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/relay-harness",
            swiftSettings: strictSwift
        ),
        .executableTarget(
            name: "domain-bench",
            dependencies: ["Relay", "Kafka", "APNsCore"],
            path: "Benchmarks/domain-bench",
            swiftSettings: strictSwift
        ),

        // Seeded randomness shared by the relay tests and the relay harness; the tinyproxy process of the proxy tests.
        .target(
            name: "TestSupport",
            dependencies: ["RelayCore", "APNsCore", .product(name: "Logging", package: "swift-log")],
            path: "Tests/TestSupport",
            swiftSettings: strictSwift
        ),

        // A front for test brokers that keeps Kafka's group rules noida-db and the mock cluster skip: session expiry, and
        // the generation check of transactional offset commits.
        .target(
            name: "KafkaBrokerFront",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            path: "Tests/KafkaBrokerFront",
            swiftSettings: strictSwift
        ),

        // Fuzzing (docs/RELIABILITY.md): shared support, then one executable per fuzz target.
        .target(
            name: "FuzzSupport",
            path: "Tests/Fuzz/Support",
            swiftSettings: strictSwift
        ),
    ] + fuzzTargets.map { fuzzTarget in
        .executableTarget(
            name: fuzzTarget.name,
            dependencies: ["FuzzSupport"] + fuzzTarget.dependencies,
            path: "Tests/Fuzz/\(fuzzTarget.name)",
            swiftSettings: strictSwift
        )
    } + [
        .testTarget(
            name: "KafkaTests",
            dependencies: ["Kafka", "TestSupport", "KafkaBrokerFront", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: strictSwift
        ),
        // APNsCore's pure values: the notification and Apple's rules.
        .testTarget(
            name: "APNsCoreTests",
            dependencies: ["APNsCore"],
            swiftSettings: strictSwift
        ),
        // A simulator and a supervisor wired together, for the tests of the APNs client and of the simulator.
        .target(
            name: "APNsTestSupport",
            dependencies: [
                "APNs",
                "APNsNGHTTP2",
                "APNsSimulator",
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/APNsTestSupport",
            swiftSettings: strictSwift
        ),
        // The APNs client: its state machines alone, and its connections, pool and supervisor against the simulator.
        .testTarget(
            name: "APNsTests",
            dependencies: [
                "APNs",
                "APNsNGHTTP2",
                "APNsSimulator",
                "APNsTestSupport",
                "TestSupport",
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSwift
        ),
        // The simulator's own behaviour: Apple's request rules, its delivery history, its certificates.
        .testTarget(
            name: "APNsSimulatorTests",
            dependencies: [
                "APNs",
                "APNsSimulator",
                "APNsTestSupport",
                "TestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictSwift
        ),
        // The pure core alone: the domain and the engine, with harnesses that play Kafka and APNs.
        .testTarget(
            name: "RelayCoreTests",
            dependencies: [
                "RelayCore",
                "TestSupport",
                // librdkafka's partitioners, which the users' home partitions must agree with.
                "Kafka",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictSwift
        ),
        // The service: the driver, sends, spans, metrics, and runs on the embedded cluster and simulators.
        .testTarget(
            name: "RelayTests",
            dependencies: [
                "Relay",
                "TestSupport",
                "KafkaBrokerFront",
                "APNs",
                "APNsSimulator",
                "APNsTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: strictSwift
        ),
        // The CLI's own logic: configuration, logs, the ops endpoint, the heap, the fuzz corpora.
        .testTarget(
            name: "ApnsRelayCLITests",
            dependencies: [
                "apns-relay", "Kafka", "Relay", "APNs", "APNsSimulator", "TestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ] + fuzzTargets.map { .target(name: $0.name) },
            swiftSettings: strictSwift
        ),
        // `apns-relay` as processes: run, stop, crash and rotate against embedded clusters, noida-db and simulators.
        .testTarget(
            name: "ApnsRelayProcessTests",
            dependencies: [
                "apns-relay", "Kafka", "Relay", "APNs", "APNsNGHTTP2", "APNsSimulator", "TestSupport", "KafkaBrokerFront",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: strictSwift
        ),
    ]
)
