#pragma once
// A grid of cells (rows × columns, e.g. layers × {key, value}) coloured on a diverging scale
// centred on zero: each cell holds a signed score, negative towards one colour, positive towards
// the other, white at zero, full colour at the largest |score| of the grid (or a fixed scale).
// Each cell shows its label; hovering shows its tooltip; clicking emits cellClicked. A colour bar
// below says what each end means. GUI thread only.

#include <QColor>
#include <QImage>
#include <QString>
#include <QStringList>
#include <QWidget>

#include <vector>

namespace gsrq::views {

class HeatmapView : public QWidget {
    Q_OBJECT

public:
    struct Cell {
        double score = 0; // NaN: no value (drawn hatched grey)
        QString text;     // drawn in the cell when it fits
        QString tooltip;
    };

    explicit HeatmapView(const QString& title, QWidget* parent = nullptr);

    // Colours of the two ends and what they mean ("KM better", "GSKM better").
    // unit follows the numbers of the colour bar ("%").
    void setScale(QColor negative, QColor positive, const QString& negativeText, const QString& positiveText,
                  const QString& unit = {});
    // A scale that does not follow the grid: |score| = max at full colour (0: follow the grid again),
    // and the colour bar's three labels (left, centre, right) instead of the numbers, e.g.
    // {"0% found", "50%", "100%"} for accuracies drawn as accuracy − 0.5.
    void setFixedScale(double max, const QStringList& barLabels = {});
    // rows × columns cells, row-major; missing cells are NaN. Clears the hover.
    void setGrid(QStringList rows, QStringList columns, std::vector<Cell> cells);
    void setCell(int row, int column, Cell cell);
    void clear();
    void setTitle(const QString& title);

    QString title() const { return m_title; }
    int rowCount() const { return int(m_rows.size()); }
    int columnCount() const { return int(m_columns.size()); }
    const Cell& cell(int row, int column) const { return m_cells.at(std::size_t(row * columnCount() + column)); }
    // The fill of a cell as painted (tests check the direction of the scale).
    QColor colorAt(int row, int column) const;
    double scaleMax() const; // the |score| drawn at full colour
    QRect cellRect(int row, int column) const;
    // Where a row's label is drawn (at least a line of text tall, centred on its row; right-aligned in
    // a column as wide as the widest label), and which rows are labelled: every row where the rows are
    // a line tall or more, else every n-th so that labels do not overlap.
    QRect rowLabelRect(int row) const;
    QList<int> labelledRows() const;
    // The map drawn at `size` (wide enough for its labels), whether or not it is on screen: for
    // reports and exports.
    QImage toImage(QSize size) const;
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

signals:
    void cellClicked(int row, int column);

protected:
    void paintEvent(QPaintEvent* e) override;
    void mouseMoveEvent(QMouseEvent* e) override;
    void mousePressEvent(QMouseEvent* e) override;
    bool event(QEvent* e) override;

private:
    bool cellAt(QPoint p, int* row, int* column) const;
    QRect gridRect() const;
    QSize canvas() const { return m_renderSize.isValid() ? m_renderSize : size(); }
    void paint(QPainter& p) const;
    mutable QSize m_renderSize; // set while toImage draws

    QString m_title;
    QStringList m_rows, m_columns;
    std::vector<Cell> m_cells;
    QColor m_negative{0x1f, 0x77, 0xb4}, m_positive{0xd9, 0x5f, 0x02};
    QString m_negativeText, m_positiveText, m_unit;
    double m_fixedMax = 0;
    QStringList m_barLabels;
    int m_hoverRow = -1, m_hoverColumn = -1;
};

} // namespace gsrq::views
