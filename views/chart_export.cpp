// ChartPanel's exports: PNG, SVG and CSV files, and the Export… button's dialog.

#include "views/chart_panel.h"

#include <QChart>
#include <QFileDialog>
#include <QMessageBox>
#include <QPainter>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QTextStream>

namespace gsrq::views {

// Each export writes a temporary file beside `path` and renames it into place (QSaveFile): a
// crash or a full disk leaves the previous file, never half of one.
bool ChartPanel::exportPng(const QString& path)
{
    flush();
    QSaveFile f(path);
    return f.open(QIODevice::WriteOnly) && m_view->grab().save(&f, "PNG") && f.commit();
}

bool ChartPanel::exportSvg(const QString& path)
{
    flush();
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly))
        return false;
    QSvgGenerator gen;
    gen.setOutputDevice(&f);
    gen.setSize(m_view->size());
    gen.setViewBox(QRect(QPoint(0, 0), m_view->size()));
    gen.setTitle(title());
    QPainter painter;
    if (!painter.begin(&gen))
        return false;
    m_view->render(&painter);
    return painter.end() && f.commit();
}

bool ChartPanel::exportCsv(const QString& path)
{
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Text))
        return false;
    QTextStream out(&f);
    const bool bars = !m_intervals.isEmpty();
    out << (bars ? "series,x,y,low,high\n" : "series,x,y\n");
    for (const auto& name : m_order) {
        const auto pts = m_data.value(name);
        const auto iv = m_intervals.value(name);
        for (int i = 0; i < pts.size(); ++i) {
            const auto& p = pts[i];
            out << '"' << QString(name).replace('"', "\"\"") << "\"," << QString::number(p.x(), 'g', 12) << ','
                << QString::number(p.y(), 'g', 12);
            if (bars)
                out << ',' << (i < iv.size() ? QString::number(iv[i].first, 'g', 12) : QString()) << ','
                    << (i < iv.size() ? QString::number(iv[i].second, 'g', 12) : QString());
            out << '\n';
        }
    }
    out.flush();
    return out.status() == QTextStream::Ok && f.commit();
}

void ChartPanel::onExport()
{
    const QString path = QFileDialog::getSaveFileName(this, tr("Export chart"), m_view->chart()->title(),
                                                      tr("PNG image (*.png);;SVG drawing (*.svg);;CSV data (*.csv)"));
    if (path.isEmpty())
        return;
    bool ok = false;
    QString written = path;
    if (path.endsWith(".svg", Qt::CaseInsensitive)) {
        ok = exportSvg(path);
    } else if (path.endsWith(".csv", Qt::CaseInsensitive)) {
        ok = exportCsv(path);
    } else {
        written = path.endsWith(".png", Qt::CaseInsensitive) ? path : path + ".png";
        ok = exportPng(written);
    }
    if (!ok)
        QMessageBox::warning(this, tr("Export chart"),
                             tr("Could not write %1 (is the folder writable, the disk full?). "
                                "Any earlier file of that name is unchanged.")
                                 .arg(written));
}

} // namespace gsrq::views
