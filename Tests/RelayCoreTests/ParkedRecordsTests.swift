import Testing

@testable import RelayCore

@Suite("Parked records: bulk records set aside in the order read")
struct ParkedRecordsTests {
    /// A parked entry as the tests park them: a number in parking order and a partition to hand over.
    struct Entry: Sendable, Equatable {
        var number: Int
        var partition: Int
    }

    @Test("an empty set takes nothing, holds no bytes, and knows no user")
    func empty() {
        var parked = ParkedRecords<Entry>()
        #expect(parked.isEmpty && parked.count == 0 && parked.bytes == 0)
        #expect(parked.takeNext() == nil)
        #expect(parked.takeAll(of: "u").isEmpty)
        #expect(parked.removeAll { _ in true } == 0)
        #expect(!parked.hasRecords(of: "u") && !parked.hasRecords(of: ""))
    }

    @Test("records come back in the order parked, with and without a user, and their bytes go with them")
    func firstInFirstOut() {
        var parked = ParkedRecords<Entry>()
        let users: [String?] = ["a", nil, "b", "a", nil, "c"]
        for (number, user) in users.enumerated() { parked.park(Entry(number: number, partition: 0), user: user, bytes: 10 * (number + 1)) }
        #expect(parked.count == 6 && parked.bytes == 210 && !parked.isEmpty)
        #expect(parked.hasRecords(of: "a") && parked.hasRecords(of: "b") && parked.hasRecords(of: "c") && !parked.hasRecords(of: "d"))
        var taken: [Int] = []
        while let entry = parked.takeNext() { taken.append(entry.number) }
        #expect(taken == [0, 1, 2, 3, 4, 5])
        #expect(parked.isEmpty && parked.bytes == 0 && !parked.hasRecords(of: "a"))
    }

    @Test("a user's records are taken all at once in their order; the rest keep theirs, and the user has none left")
    func takeAllOfAUser() {
        var parked = ParkedRecords<Entry>()
        for (number, user) in ["a", "b", "a", nil, "a", "b"].enumerated() { parked.park(Entry(number: number, partition: 0), user: user, bytes: 1) }
        #expect(parked.takeAll(of: "a").map { $0.number } == [0, 2, 4])
        #expect(!parked.hasRecords(of: "a") && parked.count == 3 && parked.bytes == 3)
        #expect(parked.takeAll(of: "a").isEmpty)
        #expect(parked.takeNext()?.number == 1)
        // The user's remaining record stays behind; taking it all leaves only the record without a user.
        #expect(parked.takeAll(of: "b").map { $0.number } == [5])
        #expect(parked.takeNext()?.number == 3 && parked.takeNext() == nil && parked.isEmpty)
    }

    @Test("a user's record parked after the user's others were taken starts a fresh list: taken alone, in its place among the rest")
    func userParksAgain() {
        var parked = ParkedRecords<Entry>()
        parked.park(Entry(number: 0, partition: 0), user: "a", bytes: 1)
        parked.park(Entry(number: 1, partition: 0), user: "b", bytes: 1)
        _ = parked.takeAll(of: "a")
        parked.park(Entry(number: 2, partition: 0), user: "a", bytes: 1)
        #expect(parked.hasRecords(of: "a"))
        #expect(parked.takeNext()?.number == 1)
        #expect(parked.takeNext()?.number == 2)
        #expect(!parked.hasRecords(of: "a") && parked.isEmpty)
    }

    @Test("removing a handed-over partition's records counts them, keeps the others in order, and forgets users left with none")
    func removeAllOfAPartition() {
        var parked = ParkedRecords<Entry>()
        let layout: [(String?, Int)] = [("a", 1), ("b", 2), ("a", 2), (nil, 1), ("c", 1), ("a", 1)]
        for (number, (user, partition)) in layout.enumerated() { parked.park(Entry(number: number, partition: partition), user: user, bytes: number + 1) }
        #expect(parked.removeAll { $0.partition == 1 } == 4)
        #expect(parked.count == 2 && parked.bytes == 2 + 3)
        #expect(!parked.hasRecords(of: "c") && parked.hasRecords(of: "a") && parked.hasRecords(of: "b"))
        #expect(parked.takeAll(of: "a").map { $0.number } == [2])
        #expect(parked.takeNext()?.number == 1 && parked.takeNext() == nil)
        // Emptied by a removal, the set parks afresh.
        parked.park(Entry(number: 9, partition: 1), user: "a", bytes: 4)
        #expect(parked.removeAll { $0.partition == 3 } == 0 && parked.count == 1)
        #expect(parked.removeAll { _ in true } == 1 && parked.isEmpty && parked.bytes == 0)
        parked.park(Entry(number: 10, partition: 1), user: nil, bytes: 5)
        #expect(parked.takeNext()?.number == 10 && parked.bytes == 0)
    }

    @Test("random parks, takes, user takes and removals agree with a list in parking order")
    func agreesWithAList() {
        for seed in 0..<20 {
            var random = SeededGenerator(seed: UInt64(seed) &+ 3_300)
            var parked = ParkedRecords<Entry>()
            var model: [(entry: Entry, user: String?, bytes: Int)] = []
            var number = 0
            for step in 0..<1_500 {
                let users = ["u0", "u1", "u2", "u3", "u4", "u5"]
                switch Int.random(in: 0..<10, using: &random) {
                case 0..<5:
                    let user = Int.random(in: 0..<4, using: &random) == 0 ? nil : users.randomElement(using: &random)
                    let bytes = Int.random(in: 0...1_000, using: &random)
                    let entry = Entry(number: number, partition: Int.random(in: 0..<4, using: &random))
                    number += 1
                    parked.park(entry, user: user, bytes: bytes)
                    model.append((entry, user, bytes))
                case 5..<7:
                    let expected = model.isEmpty ? nil : model.removeFirst().entry
                    #expect(parked.takeNext() == expected, "seed \(seed) step \(step)")
                case 7..<9:
                    let user = users.randomElement(using: &random)!
                    let expected = model.filter { $0.user == user }.map { $0.entry }
                    model.removeAll { $0.user == user }
                    #expect(parked.takeAll(of: user) == expected, "seed \(seed) step \(step)")
                default:
                    let partition = Int.random(in: 0..<4, using: &random)
                    let expected = model.count { $0.entry.partition == partition }
                    model.removeAll { $0.entry.partition == partition }
                    #expect(parked.removeAll { $0.partition == partition } == expected, "seed \(seed) step \(step)")
                }
                #expect(parked.count == model.count && parked.isEmpty == model.isEmpty, "seed \(seed) step \(step)")
                #expect(parked.bytes == model.reduce(0) { $0 + $1.bytes }, "seed \(seed) step \(step)")
                for user in users {
                    #expect(parked.hasRecords(of: user) == model.contains { $0.user == user }, "seed \(seed) step \(step) \(user)")
                }
            }
            var rest: [Entry] = []
            while let entry = parked.takeNext() { rest.append(entry) }
            #expect(rest == model.map { $0.entry }, "seed \(seed)")
        }
    }
}
