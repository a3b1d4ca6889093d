import APNs
import NIOCore
import NIOEmbedded
import NIOHTTP2
import Testing

/// The frame-level connections keep the peer's send windows open themselves (no stream channels do it for them).
@Suite("HTTP/2 inbound window")
struct HTTP2InboundWindowHandlerTests {
    static func windowUpdates(_ channel: EmbeddedChannel) throws -> [(HTTP2StreamID, Int)] {
        var updates: [(HTTP2StreamID, Int)] = []
        while let frame = try channel.readOutbound(as: HTTP2Frame.self) {
            if case .windowUpdate(let increment) = frame.payload { updates.append((frame.streamID, increment)) }
        }
        return updates
    }

    @Test("the increment tops a window up to its target once it falls below half, not before")
    func increment() {
        #expect(HTTP2InboundWindowHandler.increment(windowSize: 40_000, target: 65_535) == nil)
        #expect(HTTP2InboundWindowHandler.increment(windowSize: 32_766, target: 65_535) == 32_769)
        #expect(HTTP2InboundWindowHandler.increment(windowSize: 0, target: 65_535) == 65_535)
        #expect(HTTP2InboundWindowHandler.increment(windowSize: -100, target: 1_000) == 1_100)
        #expect(HTTP2InboundWindowHandler.increment(windowSize: 0, target: Int(Int32.max)) == Int(Int32.max))
    }

    @Test("on activation the connection window grows to its target; window events below half get an update")
    func updates() throws {
        let channel = EmbeddedChannel(handler: HTTP2InboundWindowHandler(connectionTarget: 1 << 20, streamTarget: 65_535))
        channel.pipeline.fireChannelActive()
        var updates = try Self.windowUpdates(channel)
        #expect(updates.count == 1)
        #expect(updates.first?.0 == .rootStream)
        #expect(updates.first?.1 == (1 << 20) - 65_535)

        let events: [(HTTP2StreamID, Int)] = [
            (.rootStream, 600_000), (.rootStream, 500_000), (HTTP2StreamID(1), 40_000), (HTTP2StreamID(1), 30_000),
        ]
        for (streamID, size) in events {
            channel.pipeline.fireUserInboundEventTriggered(NIOHTTP2WindowUpdatedEvent(streamID: streamID, inboundWindowSize: size, outboundWindowSize: nil))
        }
        // An event that only reports the outbound window is not ours to act on.
        channel.pipeline.fireUserInboundEventTriggered(NIOHTTP2WindowUpdatedEvent(streamID: .rootStream, inboundWindowSize: nil, outboundWindowSize: 10))
        updates = try Self.windowUpdates(channel)
        #expect(updates.map(\.0) == [.rootStream, HTTP2StreamID(1)])
        #expect(updates.map(\.1) == [(1 << 20) - 500_000, 65_535 - 30_000])
        _ = try channel.finish()
    }
}
