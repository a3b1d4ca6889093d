// The pure core (the domain and the engine) lives in RelayCore, which links no NIO and no librdkafka; whatever runs
// the relay sees it through here.
@_exported public import RelayCore
