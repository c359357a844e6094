// GPU discovery: without a device (or without a CUDA build) the query explains why and the
// program goes on; with one, the facts it reports are plausible.

#include "device.h"

#include <QtTest>

class TestGpu : public QObject {
    Q_OBJECT

private slots:
    void queryNeverFailsSilently()
    {
        const auto q = gsrq::gpu::queryDevices();
        if (q.devices.empty())
            QVERIFY2(!q.message.empty(), "an empty device list must say why");
#ifdef GSRQ_HAVE_CUDA
        QVERIFY(q.builtWithCuda);
#else
        QVERIFY(!q.builtWithCuda);
#endif
    }
    void devicesArePlausible()
    {
        const auto q = gsrq::gpu::queryDevices();
        if (q.devices.empty())
            QSKIP(q.message.c_str());
        for (const auto& d : q.devices) {
            QVERIFY(!d.name.empty());
            QVERIFY(d.memoryBytes > (1ull << 30));
            QVERIFY(d.computeMajor >= 5);
            QVERIFY(d.multiprocessors > 0);
        }
    }
};

QTEST_APPLESS_MAIN(TestGpu)
#include "tst_gpu.moc"
