import APNs
import Testing

@Suite("The pool's table of connections")
struct ConnectionTableTests {
    let first = APNsConnectionID(1)
    let second = APNsConnectionID(2)
    let third = APNsConnectionID(3)

    @Test("a value set for an id is read back, changed, and removed by setting nil; other ids keep theirs")
    func setReadChangeRemove() {
        var table = ConnectionTable<Int>()
        #expect(table.ids.isEmpty)
        table[first] = 10
        table[second] = 20
        table[third] = 30
        #expect(table[second] == 20)
        table[second] = 21
        #expect(table[second] == 21)
        #expect(table.ids.count == 3)
        table[second] = nil
        #expect(table[second] == nil)
        #expect(table.ids == [first, third])
        #expect(table.values == [10, 30])
        table[second] = nil
        #expect(table.ids.count == 2)
    }

    @Test("a value changes in place at its index; removing returns the value, once")
    func inPlaceAndRemoval() {
        var table = ConnectionTable<Int>()
        table[first] = 1
        table[third] = 3
        let index = table.index(of: third)
        #expect(index == 1)
        if let index { table[at: index] += 4 }
        #expect(table[third] == 7)
        #expect(table.index(of: second) == nil)
        #expect(table.removeValue(for: first) == 1)
        #expect(table.removeValue(for: first) == nil)
        #expect(table.ids == [third])
        table.removeAll()
        #expect(table.ids.isEmpty)
    }
}
