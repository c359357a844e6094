#include "views/heatmap_view.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>

namespace gsrq::views {

namespace {

constexpr int kTitleHeight = 22;
constexpr int kBarHeight = 34; // the colour bar and its labels
constexpr int kMargin = 6;

QColor blend(QColor from, QColor to, double t)
{
    t = std::clamp(t, 0.0, 1.0);
    return QColor::fromRgbF(float(from.redF() + (to.redF() - from.redF()) * t),
                            float(from.greenF() + (to.greenF() - from.greenF()) * t),
                            float(from.blueF() + (to.blueF() - from.blueF()) * t));
}

} // namespace

HeatmapView::HeatmapView(const QString& title, QWidget* parent) : QWidget(parent), m_title(title)
{
    setMouseTracking(true);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
}

void HeatmapView::setScale(QColor negative, QColor positive, const QString& negativeText, const QString& positiveText,
                           const QString& unit)
{
    m_unit = unit;
    m_negative = negative;
    m_positive = positive;
    m_negativeText = negativeText;
    m_positiveText = positiveText;
    update();
}

void HeatmapView::setGrid(QStringList rows, QStringList columns, std::vector<Cell> cells)
{
    m_rows = std::move(rows);
    m_columns = std::move(columns);
    m_cells = std::move(cells);
    m_cells.resize(std::size_t(m_rows.size() * m_columns.size()), Cell{std::nan(""), {}, {}});
    m_hoverRow = m_hoverColumn = -1;
    updateGeometry();
    update();
}

void HeatmapView::setCell(int row, int column, Cell cell)
{
    if (row < 0 || column < 0 || row >= rowCount() || column >= columnCount())
        return;
    m_cells[std::size_t(row * columnCount() + column)] = std::move(cell);
    update();
}

void HeatmapView::clear()
{
    setGrid({}, {}, {});
}

void HeatmapView::setTitle(const QString& title)
{
    m_title = title;
    update();
}

void HeatmapView::setFixedScale(double max, const QStringList& barLabels)
{
    m_fixedMax = max > 0 ? max : 0;
    m_barLabels = barLabels.size() == 3 ? barLabels : QStringList();
    update();
}

double HeatmapView::scaleMax() const
{
    if (m_fixedMax > 0)
        return m_fixedMax;
    double m = 0;
    for (const auto& c : m_cells)
        if (std::isfinite(c.score))
            m = std::max(m, std::abs(c.score));
    return m;
}

QColor HeatmapView::colorAt(int row, int column) const
{
    const double s = cell(row, column).score;
    if (!std::isfinite(s))
        return QColor(0xdd, 0xdd, 0xdd);
    const double m = scaleMax();
    if (m <= 0 || s == 0)
        return Qt::white;
    return blend(Qt::white, s < 0 ? m_negative : m_positive, std::abs(s) / m);
}

QRect HeatmapView::gridRect() const
{
    int widest = fontMetrics().horizontalAdvance(QStringLiteral("layer 00"));
    for (const auto& r : m_rows)
        widest = std::max(widest, fontMetrics().horizontalAdvance(r));
    const int labelWidth = widest + 2 * kMargin;
    const QSize c = canvas();
    return QRect(labelWidth, kTitleHeight + fontMetrics().height() + 2, std::max(1, c.width() - labelWidth - kMargin),
                 std::max(1, c.height() - kTitleHeight - fontMetrics().height() - 2 - kBarHeight - kMargin));
}

QRect HeatmapView::cellRect(int row, int column) const
{
    if (rowCount() == 0 || columnCount() == 0)
        return {};
    const QRect g = gridRect();
    const double w = double(g.width()) / columnCount(), h = double(g.height()) / rowCount();
    return QRect(
        QPoint(g.left() + int(std::round(column * w)), g.top() + int(std::round(row * h))),
        QPoint(g.left() + int(std::round((column + 1) * w)) - 1, g.top() + int(std::round((row + 1) * h)) - 1));
}

bool HeatmapView::cellAt(QPoint p, int* row, int* column) const
{
    for (int r = 0; r < rowCount(); ++r)
        for (int c = 0; c < columnCount(); ++c)
            if (cellRect(r, c).contains(p)) {
                *row = r;
                *column = c;
                return true;
            }
    return false;
}

QRect HeatmapView::rowLabelRect(int row) const
{
    const QRect cr = cellRect(row, 0);
    if (cr.height() >= fontMetrics().height()) // the row is a line tall: its label is beside it
        return QRect(0, cr.top(), gridRect().left() - kMargin, cr.height());
    const int h = fontMetrics().height();
    return QRect(0, cr.center().y() - h / 2, gridRect().left() - kMargin, h);
}

QList<int> HeatmapView::labelledRows() const
{
    QList<int> rows;
    if (rowCount() == 0 || columnCount() == 0)
        return rows;
    // Every n-th row, n the rows a line of text spans (the row pitch is the grid's height over its rows).
    const double pitch = double(gridRect().height()) / rowCount();
    // A line and a pixel: labels centred on rows rounded to whole pixels never touch.
    const int every = std::max(1, int(std::ceil((fontMetrics().height() + 1) / std::max(pitch, 1e-9) - 1e-9)));
    for (int r = 0; r < rowCount(); r += every)
        rows << r;
    return rows;
}

QSize HeatmapView::sizeHint() const
{
    return {260, kTitleHeight + kBarHeight + 2 * kMargin + fontMetrics().height() + std::max(4, rowCount()) * 22};
}

// Tall enough for every row to carry its label (a line of text each), as the model page's 30 layers
// need: "layer 7" under "layer 6", none skipped or cut.
QSize HeatmapView::minimumSizeHint() const
{
    return {160, kTitleHeight + kBarHeight + 2 * kMargin + 2 + fontMetrics().height() +
                     (fontMetrics().height() + 2) * std::max(2, rowCount())};
}

void HeatmapView::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    paint(p);
}

QImage HeatmapView::toImage(QSize size) const
{
    QImage image(size, QImage::Format_ARGB32);
    image.fill(Qt::white);
    m_renderSize = size;
    {
        QPainter p(&image);
        p.setRenderHint(QPainter::TextAntialiasing);
        paint(p);
    }
    m_renderSize = QSize();
    return image;
}

void HeatmapView::paint(QPainter& p) const
{
    const QSize c = canvas();
    p.fillRect(QRect(QPoint(0, 0), c), palette().base());
    p.setPen(palette().text().color());
    QFont bold = font();
    bold.setBold(true);
    p.setFont(bold);
    p.drawText(QRect(0, 0, c.width(), kTitleHeight), Qt::AlignCenter, m_title);
    p.setFont(font());
    if (rowCount() == 0 || columnCount() == 0)
        return;
    const QRect g = gridRect();
    // Column headers above, row labels to the left.
    for (int c = 0; c < columnCount(); ++c) {
        const QRect r = cellRect(0, c);
        p.drawText(QRect(r.left(), kTitleHeight, r.width(), fontMetrics().height()), Qt::AlignCenter,
                   fontMetrics().elidedText(m_columns[c], Qt::ElideRight, r.width()));
    }
    for (int r : labelledRows())
        p.drawText(rowLabelRect(r), Qt::AlignRight | Qt::AlignVCenter, m_rows[r]);
    for (int r = 0; r < rowCount(); ++r)
        for (int c = 0; c < columnCount(); ++c) {
            const QRect cr = cellRect(r, c);
            const QColor fill = colorAt(r, c);
            p.fillRect(cr, fill);
            if (!std::isfinite(cell(r, c).score))
                p.fillRect(cr, QBrush(QColor(0xaa, 0xaa, 0xaa), Qt::BDiagPattern));
            const QString& text = cell(r, c).text;
            if (!text.isEmpty() && fontMetrics().horizontalAdvance(text) + 4 <= cr.width() &&
                fontMetrics().height() <= cr.height()) {
                p.setPen(fill.lightnessF() < 0.5 ? Qt::white : Qt::black);
                p.drawText(cr, Qt::AlignCenter, text);
            }
        }
    p.setPen(QColor(0xff, 0xff, 0xff));
    for (int c = 1; c < columnCount(); ++c)
        p.drawLine(cellRect(0, c).left(), g.top(), cellRect(0, c).left(), g.bottom());
    if (m_hoverRow >= 0 && !m_renderSize.isValid()) {
        p.setPen(QPen(palette().text().color(), 2));
        p.drawRect(cellRect(m_hoverRow, m_hoverColumn).adjusted(1, 1, -1, -1));
    }
    // The colour bar: negative end, white at zero, positive end.
    const QRect bar(g.left(), g.bottom() + kMargin, g.width(), 10);
    QLinearGradient grad(bar.topLeft(), bar.topRight());
    grad.setColorAt(0, m_negative);
    grad.setColorAt(0.5, Qt::white);
    grad.setColorAt(1, m_positive);
    p.fillRect(bar, grad);
    p.setPen(palette().text().color());
    p.drawRect(bar.adjusted(0, 0, -1, -1));
    const double m = scaleMax();
    const QString mText = QString::number(m, 'g', 3) + m_unit;
    const QRect labels(bar.left(), bar.bottom() + 2, bar.width(), fontMetrics().height());
    if (m_barLabels.size() == 3) {
        p.drawText(labels, Qt::AlignLeft, m_barLabels[0]);
        p.drawText(labels, Qt::AlignHCenter, m_barLabels[1]);
        p.drawText(labels, Qt::AlignRight, m_barLabels[2]);
        return;
    }
    p.drawText(labels, Qt::AlignLeft, m_negativeText.isEmpty() ? "−" + mText : m_negativeText + " " + mText);
    p.drawText(labels, Qt::AlignHCenter, QStringLiteral("0"));
    p.drawText(labels, Qt::AlignRight, m_positiveText.isEmpty() ? mText : m_positiveText + " " + mText);
}

void HeatmapView::mouseMoveEvent(QMouseEvent* e)
{
    int r = -1, c = -1;
    if (!cellAt(e->position().toPoint(), &r, &c))
        r = c = -1;
    if (r != m_hoverRow || c != m_hoverColumn) {
        m_hoverRow = r;
        m_hoverColumn = c;
        update();
    }
    setCursor(r >= 0 ? Qt::PointingHandCursor : Qt::ArrowCursor);
}

void HeatmapView::mousePressEvent(QMouseEvent* e)
{
    int r = -1, c = -1;
    if (e->button() == Qt::LeftButton && cellAt(e->position().toPoint(), &r, &c))
        emit cellClicked(r, c);
}

bool HeatmapView::event(QEvent* e)
{
    if (e->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(e);
        int r = -1, c = -1;
        if (cellAt(help->pos(), &r, &c) && !cell(r, c).tooltip.isEmpty())
            QToolTip::showText(help->globalPos(), cell(r, c).tooltip, this, cellRect(r, c));
        else
            QToolTip::hideText();
        return true;
    }
    if (e->type() == QEvent::Leave && m_hoverRow >= 0) {
        m_hoverRow = m_hoverColumn = -1;
        update();
    }
    return QWidget::event(e);
}

} // namespace gsrq::views
