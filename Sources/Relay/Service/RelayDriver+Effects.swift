// The driver performs the engine's effects: records to produce, sends, commits, reads, the end.

import APNs
import Foundation
import Kafka
import Logging
import NIOCore
import RelayCore

extension RelayDriver {
    /// Performs ``effects`` and empties it, keeping its storage for the next input.
    mutating func executeEffects(in group: inout DiscardingTaskGroup) {
        var taken: [RelayEffect] = []
        swap(&taken, &effects)
        execute(taken, in: &group)
        taken.removeAll(keepingCapacity: true)
        swap(&taken, &effects)
    }

    mutating func execute(_ effects: [RelayEffect], in group: inout DiscardingTaskGroup) {
        for effect in effects {
            switch effect {
            case .publishResult(let record, let reference):
                spans?.publishing(reference, device: record.token, trace: record.trace, status: record.status.rawValue)
                produce(KafkaRecord(topic: configuration.resultsTopic, key: Array(record.eventID.utf8), value: record.encoded(),
                                    headers: record.trace.headers),
                              for: effect, onSuccess: .published(reference, device: record.token))
            case .publishDeadLetter(let message, let error, let source):
                spans?.publishing(source, device: nil, trace: TraceHeaders(of: message.headers), status: nil)
                withEventTrace(TraceHeaders(of: message.headers)) {
                    logger.warning("event is a dead letter", metadata: ["source": "\(source)", "error": "\(error)"])
                }
                produce(KafkaRecord(topic: configuration.deadLetterTopic, key: message.key.map(Array.init), value: message.value.map(Array.init),
                                    headers: DeadLetterHeaders.producerHeaders(of: message.headers)
                                        + DeadLetterHeaders.headers(error: error, source: source)),
                              for: effect, onSuccess: .published(source, device: nil))
            case .publishDeadLetterReference(let reference):
                spans?.publishing(reference.source, device: nil, trace: reference.trace, status: nil)
                withEventTrace(reference.trace) {
                    logger.warning("dead letter too large to publish; publishing a reference to the input", metadata: [
                        "source": "\(reference.source)", "size": "\(reference.size)", "error": "\(reference.error)"])
                }
                produce(KafkaRecord(topic: configuration.deadLetterTopic, key: reference.key, value: reference.encoded(),
                                    headers: reference.trace.headers + DeadLetterHeaders.headers(error: reference.error, source: reference.source)
                                        + [KafkaHeader(key: DeadLetterHeaders.kind, value: "reference")]),
                              for: effect, onSuccess: .published(reference.source, device: nil))
            case .publishFailedToken(let record, _):
                produce(KafkaRecord(topic: configuration.failedTokensTopic, key: Array(record.token.utf8), value: record.encoded(),
                                    headers: record.trace.headers),
                              for: effect, onSuccess: .publishSucceeded(.failedTokens))
            case .publishWrongEnvironment(let record, _):
                produce(KafkaRecord(topic: configuration.wrongEnvironmentTopic, key: Array(record.token.utf8), value: record.encoded(),
                                    headers: record.trace.headers),
                              for: effect, onSuccess: .publishSucceeded(.wrongEnvironment))
            case .appendChangelog(let user, let record, let partition, let token):
                if spans != nil { spans!.applying(token, seq: record.seq, badge: record.badge, trace: engine.traceOfChangelogAppend(token)) }
                // Reports of one partition come in append order, which is the order a user's events need.
                produce(KafkaRecord(topic: configuration.badgeStateTopic, partition: partition, key: Array(user.utf8), value: record.encoded()),
                              for: effect, onSuccess: .changelogged(token))
            case .writeProgress(let marker, let partition, let at, let handOver):
                produce(progressRecord(marker, partition: partition, at: at), for: effect, onSuccess: .progressStored(handOver: handOver))
            case .send(let dispatch):
                spans?.sending(dispatch)
                dispatches.append(dispatch)
            case .stopWrites(let partitions):
                // The batch's sends so far reach the sender first, each bringing its `.sent`: of these partitions', what
                // found no stream free at once then comes back unwritten.
                startSends()
                sends.stopWrites(partitions, via: sender)
            case .cancelSends(let partitions):
                logger.warning("abandoning sends still in flight", metadata: ["partitions": "\(partitions)"])
                startSends()
                sends.cancel(partitions, via: sender)
            case .permitSends(let until):
                startSends()
                sends.permitWrites(until: NIODeadline.now() + .milliseconds(until - now().monotonic))
            case .restore(let partition, let generation):
                restore(partition, generation: generation, in: &group)
            case .readLayoutOfPartitionZero(let partition, let generation):
                readLayoutOfPartitionZero(for: partition, generation: generation, in: &group)
            case .writeLayout(let layout, let partition, let generation):
                logger.info("recording the partition layout", metadata: ["partition": "\(partition)", "partitions": "\(layout.partitionCount)"])
                produce(KafkaRecord(topic: configuration.badgeStateTopic, partition: partition.partition, key: PartitionLayout.recordKey, value: layout.encoded()),
                        for: effect, onSuccess: .layoutStored(partition, generation: generation))
            case .forwardEvent(let message, let user, let home, let source):
                produce(KafkaRecord(topic: configuration.eventsTopic, partition: home, key: Array(user.utf8), value: message.value.map(Array.init),
                                    headers: Self.forwardHeaders(of: message, source: source)),
                        for: effect, onSuccess: .published(source, device: nil))
            case .loadDeviceRegistry:
                group.addTask { [devices = clients.devices, input] in await Self.followDevices(devices, into: input) }
            case .commit(let offsets, let request) where transactions != nil:
                requestTransactionalCommit(offsets, request: request, in: &group)
            case .commit(let offsets, let request):
                // Answered on librdkafka's thread; nothing here waits for it (the engine bounds the wait).
                clients.consumer.commit(offsets) { [input, logger] result in
                    if case .failure(let error) = result { logger.warning("commit failed; the next one covers it", metadata: ["error": "\(error)"]) }
                    input.yield(.committed(request, (try? result.get()).map { offsets }))
                }
            case .acknowledgeRevoke(let id):
                guard let revoke = revokes[id] else { continue }
                startSends()
                sends.close(revoke.partitions)
                // What the hand-over wrote is visible before the partitions move: it is committed first.
                acknowledgeWhenCommitted(id, now: now(), in: &group)
            case .pause(let partitions):
                clients.consumer.pause(partitions)
            case .resume(let partitions):
                clients.consumer.resume(partitions)
            case .stopped(let handedOver):
                if !handedOver { logger.warning("the stop's hand-over did not complete in time; the next owner redoes what was unfinished") }
                ending = .stopped(handedOver: handedOver)
            case .exit(let code, let reason):
                ending = .failed(reason, code: code)
                status.update { $0.failure = reason }
                logger.critical("the relay cannot go on; exiting for a restart", metadata: ["reason": "\(reason)"])
            }
        }
    }

    /// Queues a record for the batch's end (``flush(in:)``).
    private mutating func produce(_ record: KafkaRecord, for effect: RelayEffect, onSuccess: RelayService.Delivery) {
        outbox.queue(record, for: effect, onSuccess: onSuccess)
    }

    /// Starts the sends gathered so far, in one call to the sender.
    mutating func startSends() {
        guard !dispatches.isEmpty else { return }
        sends.send(dispatches, via: sender, answering: input)
        dispatches.removeAll(keepingCapacity: true)
    }

    /// Starts the gathered sends and hands the gathered records to their producers, in the order
    /// the engine asked for them.
    mutating func flush(in group: inout DiscardingTaskGroup) async {
        startSends()
        let input = self.input
        let broken = await outbox.produceQueued(via: clients, transactions: &transactions, producer: transactionalProducer,
                                                eventsTopic: configuration.eventsTopic) { effect, failure in
            input.yield(.publishFailed(effect, failure))
        }
        if let broken {
            openTransactionBroke(TransactionFailure(broken), now: now(), in: &group)
        }
        // The badge changes just produced: their notifications wait for this commit, which delivers them.
        if transactions != nil { commitTransaction(intervalPassed: false, in: &group) }
    }

    /// A forwarded event keeps its producer's headers (a forward header of an earlier hop is replaced by this one's).
    private static func forwardHeaders(of message: KafkaMessage, source: RecordReference) -> [KafkaHeader] {
        message.headers.filter { $0.key != ForwardSource.header }
            + [KafkaHeader(key: ForwardSource.header, value: ForwardSource(partition: source.partition.partition, offset: source.offset).headerValue)]
    }


    private func progressRecord(_ marker: ProgressMarker, partition: Int32, at: Int64) -> KafkaRecord {
        let encoded = marker.encodedMeasured(at: at)
        if encoded.droppedDeviceLists > 0 {
            logger.warning("progress marker over its size bound: some open records' done devices left out (the next owner sends to them again)",
                           metadata: ["partition": "\(partition)", "records": "\(encoded.droppedDeviceLists)"])
        }
        if let lowered = encoded.loweredThrough {
            logger.warning("progress marker over its size bound: it claims only the records through the offset below (the next owner redoes the rest, same apns-ids)",
                           metadata: ["partition": "\(partition)", "through": "\(lowered)", "finished_through": "\(marker.through)"])
        }
        return KafkaRecord(topic: configuration.badgeStateTopic, partition: partition, key: ProgressMarker.key, value: encoded.value)
    }
}
