import Testing

@testable import RelayCore

@Suite("The serial table")
struct SerialTableTests {
    @Test("values added in serial order are found by serial; retiring them in any order leaves exactly the rest")
    func outOfOrderRetirement() {
        var table = SerialTable<String>()
        for serial: UInt64 in 10..<20 { table[serial] = "s\(serial)" }
        #expect(table.count == 10 && table[9] == nil && table[10] == "s10" && table[19] == "s19" && table[20] == nil)
        #expect(table.removeValue(forKey: 14) == "s14")
        #expect(table.removeValue(forKey: 14) == nil)
        #expect(table.removeValue(forKey: 10) == "s10")
        table[19] = nil
        #expect(table.count == 7)
        #expect(table.serials { _ in true } == [11, 12, 13, 15, 16, 17, 18])
        #expect(table[10] == nil && table[11] == "s11" && table[14] == nil && table[19] == nil)
        table[13] = "replaced"
        #expect(table[13] == "replaced" && table.count == 7)
        // A serial after the held ones, past a gap, is added; the gap holds nothing.
        table[25] = "s25"
        #expect(table.count == 8 && table[22] == nil && table[25] == "s25")
        for serial in table.serials(where: { _ in true }) { table.removeValue(forKey: serial) }
        #expect(table.isEmpty && table.serials { _ in true }.isEmpty)
        // Empty, the next serial starts it afresh.
        table[40] = "s40"
        #expect(table.count == 1 && table[40] == "s40" && table[25] == nil)
    }

    @Test("serials(where:) picks by value, ascending; retiring what is not held changes nothing")
    func selection() {
        var table = SerialTable<Int>()
        for serial: UInt64 in 0..<8 { table[serial] = Int(serial) % 3 }
        #expect(table.serials { $0 == 0 } == [0, 3, 6])
        table[100] = nil
        #expect(table.removeValue(forKey: 100) == nil && table.count == 8)
        for serial in table.serials(where: { $0 == 0 }) { table[serial] = nil }
        #expect(table.count == 5 && table.serials { _ in true } == [1, 2, 4, 5, 7])
    }

    @Test("one value held while thousands after it come and go: the slots stay few (it waits apart) and it is still found, replaced and retired")
    func longHeldValue() {
        var table = SerialTable<Int>()
        table[0] = -1
        // Ten in flight at a time after it, each retired ten serials later.
        for serial: UInt64 in 1...20_000 {
            table[serial] = Int(serial)
            if serial > 10 { table.removeValue(forKey: serial - 10) }
        }
        #expect(table.count == 11)
        #expect(table.slotCount <= 1_025, "holes outnumbering values are not kept (\(table.slotCount) slots)")
        #expect(table[0] == -1 && table[19_990] == nil && table[19_991] == 19_991)
        #expect(table.serials { _ in true } == [0] + Array(19_991...20_000))
        table[0] = -2
        #expect(table[0] == -2 && table.count == 11)
        #expect(table.removeValue(forKey: 0) == -2)
        #expect(table[0] == nil && table.count == 10 && table.serials { $0 < 0 }.isEmpty)
        table[19_991] = nil
        #expect(table.count == 9 && table.serials { _ in true } == Array(19_992...20_000))
    }
}
