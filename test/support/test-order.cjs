// Jest's own order (failed first, then slowest by its cache, then largest file), turned around when
// EVENTRAIL_TEST_ORDER=light-first: .ci/run runs two Jest processes at once on a 2-core machine, and
// in the same order both would run their heaviest multi-process suites at the same moment.
// CommonJS because Jest loads a test sequencer without the suites' transform.
const Sequencer = require('@jest/test-sequencer').default;

class TestOrder extends Sequencer {
  sort(tests) {
    const sorted = super.sort(tests);
    return process.env.EVENTRAIL_TEST_ORDER === 'light-first' ? [...sorted].reverse() : sorted;
  }
}

module.exports = TestOrder;
